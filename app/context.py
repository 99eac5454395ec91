"""What every page shares: settings, the engine bridge, the library, the chat store,
the message center, and the model that is loaded. Built once in :mod:`app.main`.
GUI thread only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.bridge import EngineBridge
from app.history import ChatStore
from app.messages import Messages
from engine import settings as settings_mod
from engine.hub.library import Library
from engine.runtime import exact as exact_mod
from engine.runtime import jobs as J
from engine.runtime.depth import DraftDepth
from engine.runtime.loader import LoadSpec, MtpSource
from engine.settings import Settings
from engine.synth.demo import demo_model_path


@dataclass
class AppContext:
    settings: Settings
    bridge: EngineBridge
    library: Library
    chats: ChatStore
    messages: Messages | None = None  # set once the window exists
    settings_path: Path | None = None

    def save_settings(self) -> None:
        settings_mod.save(self.settings, self.settings_path)


class ModelController(QObject):
    """Loads models into the engine and knows which one is loaded.

    Signals:
        loading(str)          a load started (display name)
        progress(float, str)
        loaded(dict)          info of the loaded model
        loadFailed(object)    the error
    """

    loading = Signal(str)
    progress = Signal(float, str)
    loaded = Signal(dict)
    loadFailed = Signal(object)

    def __init__(self, ctx: AppContext, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.current: dict | None = None
        self.path: str | None = None
        self.head: str | None = None
        self._job: int | None = None
        b = ctx.bridge
        b.progress.connect(self._on_progress)
        b.finished.connect(self._on_finished)
        b.failed.connect(self._on_failed)

    @property
    def busy(self) -> bool:
        return self._job is not None

    def load(self, path: str | Path, head: str | Path | None = None, source: str | None = None) -> None:
        s = self.ctx.settings
        source = source or s.mtp.source
        if source == "external" and head is None:
            source = "auto"
        spec = LoadSpec(
            Path(path),
            head=Path(head) if head else None,
            mtp=MtpSource(source),
            n_ctx=s.n_ctx,
            max_draft_depth=max(s.max_draft_depth, DraftDepth.parse(s.mtp.depth).deepest(1)),
            # exact mode applies once the process started with it (the Backend page says so)
            exact=s.exact and exact_mod.tiled_off(),
        )
        self.path, self.head = str(path), str(head) if head else None
        self._job = self.ctx.bridge.submit(J.LoadModel(spec)).id
        self.loading.emit(Path(path).name)

    def load_startup(self, model: str | Path | None = None) -> None:
        """The model named on the command line (or opened from the file manager), else
        the last one used, else the bundled demo."""
        s = self.ctx.settings
        if model is not None:
            self.load(model)
        elif s.last_model and Path(s.last_model).exists():
            self.load(s.last_model, s.last_head if s.last_head and Path(s.last_head).exists() else None)
        else:
            self.load(demo_model_path())

    def reload(self, source: str) -> None:
        if self.path:
            self.load(self.path, self.head, source)

    def _on_progress(self, jid: int, fraction: float, message: str) -> None:
        if jid == self._job:
            self.progress.emit(fraction, message)

    def _on_finished(self, jid: int, result: object, cancelled: bool) -> None:
        if jid != self._job:
            return
        self._job = None
        if cancelled or not isinstance(result, dict):
            return
        self.current = result
        if self.path and Path(self.path).resolve() != demo_model_path().resolve():
            self.ctx.settings.last_model = self.path
            self.ctx.settings.last_head = self.head
        else:
            self.ctx.settings.last_model = None
            self.ctx.settings.last_head = None
        self.loaded.emit(result)

    def _on_failed(self, jid: int, error: object) -> None:
        if jid == self._job:
            self._job = None
            self.current = None
            self.loadFailed.emit(error)
