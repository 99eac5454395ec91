"""What every page shares: settings, the engine bridge, the library, the chat store,
the message center, and the model that is loaded. Built once in :mod:`app.main`.
GUI thread only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.bridge import EngineBridge, JobSignals
from app.history import ChatStore
from app.messages import Messages
from engine.facade import settings as settings_mod
from engine.facade import Library
from engine.facade import exact as exact_mod
from engine.facade import J
from engine.facade import DraftDepth
from engine.facade import LoadSpec, MtpSource
from engine.facade import ModelInfo
from engine.facade import Settings
from engine.facade import demo_model_path


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


def load_depth(s: Settings) -> int:
    """The draft depth a load makes room for (its MTP context and rollback state)."""
    return DraftDepth.parse(s.mtp.depth).load_depth(s.max_draft_depth)


class ModelController(QObject):
    """Loads models into the engine and knows which one is loaded.

    Signals:
        loading(str)          a load started (display name)
        progress(float, str)
        loaded(object)        the loaded model (ModelInfo)
        loadFailed(object)    the error
        notice(str)           something the load could not honour, and what it did instead
                              (also kept in ``notes`` until the next load)
        unloaded()            the loaded model is gone from the engine
    """

    loading = Signal(str)
    notice = Signal(str)
    unloaded = Signal()
    progress = Signal(float, str)
    loaded = Signal(object)
    loadFailed = Signal(object)

    def __init__(self, ctx: AppContext, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.current: ModelInfo | None = None
        self.path: str | None = None
        self.head: str | None = None
        self.mmproj: str | None = None  # the projector the model was loaded with (it sees images)
        self._job: JobSignals | None = None
        self.notes: list[str] = []  # what the current load could not honour
        self._last: tuple | None = None  # the last load's arguments, for load_anyway
        ctx.bridge.modelsChanged.connect(self._on_models_changed)

    @property
    def busy(self) -> bool:
        return self._job is not None

    def load(
        self,
        path: str | Path,
        head: str | Path | None = None,
        source: str | None = None,
        *,
        notes: tuple[str, ...] = (),
        fit: str = "shrink",
        mmproj: str | Path | None = None,
    ) -> None:
        """Load ``path``; ``notes``: what the caller could not honour (told to the user
        with the result). ``fit``: the memory check (LoadSpec.fit): "shrink" lowers the
        context setting to what fits this machine's free memory and refuses a model that
        fits at no context; "off" loads anyway (:meth:`load_anyway`). ``mmproj``: the
        projector the model sees images with (None: text only)."""
        s = self.ctx.settings
        self._last = (path, head, source, notes, mmproj)
        source = source or s.mtp.source
        self.notes = list(notes)
        if fit == "off":
            self.notes.append("loaded without the memory check: it may run out of memory")
        if source == "external" and head is None:
            source = "auto"
            self.notes.append(
                "external MTP needs a head file and none is paired with this model, so MTP source is auto "
                "(the model's own NextN layers, if any)"
            )
        rpc, split = self._rpc()
        for note in self.notes:
            self.notice.emit(note)
        spec = LoadSpec(
            Path(path),
            head=Path(head) if head else None,
            mtp=MtpSource(source),
            n_ctx=s.n_ctx,  # the cap: the memory check may lower it
            max_draft_depth=load_depth(s),
            # exact mode applies once the process started with it (the Backend page says so)
            exact=s.exact and exact_mod.tiled_off() and not rpc,
            rpc=rpc,
            tensor_split=split,
            fit=fit,
            parallel=max(1, min(s.parallel, 16)),
            mmproj=Path(mmproj) if mmproj else None,
        )
        self.path, self.head = str(path), str(head) if head else None
        self.mmproj = str(mmproj) if mmproj else None
        job = self._job = self.ctx.bridge.run(J.LoadModel(spec))
        job.progress.connect(self.progress)
        job.finished.connect(lambda result, cancelled: self._on_finished(job, result, cancelled))
        job.failed.connect(lambda error: self._on_failed(job, error))
        self.loading.emit(Path(path).name)

    def load_entry(self, entry) -> None:
        """Load a library entry, with its paired MTP head when it has one (loaded without
        it, and told so, when the head is gone) and its projector when it has one."""
        from engine.facade import LibraryError, MtpStatus

        lib = self.ctx.library
        head = None
        notes: tuple[str, ...] = ()
        if entry.pair:
            try:
                head = lib.get(entry.pair).path(lib.root)
            except LibraryError as err:  # the paired head was deleted or its record is broken
                notes = (f"loaded without its MTP head: {err}",)
        source = "external" if head is not None and entry.mtp == MtpStatus.NONE else None
        self.load(entry.path(lib.root), head, source, notes=notes, mmproj=lib.projector_path(entry))

    def _rpc(self) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
        """The saved RPC pool, or none (with a note) when the saved list is unusable."""
        from engine.facade import InvalidSettingError
        from engine.facade.machine import parse_endpoints, parse_tensor_split

        r = self.ctx.settings.rpc
        try:
            eps = tuple(str(e) for e in parse_endpoints(r.endpoints))
            split = parse_tensor_split(r.tensor_split) if eps else None
        except InvalidSettingError as e:
            self.notes.append(f"the RPC settings cannot be used ({e}), so the model loads on this machine alone")
            return (), None
        if eps and self.ctx.settings.exact and exact_mod.tiled_off():
            self.notes.append("exact mode does not apply to models on RPC devices; this load is not exact")
        return eps, split

    def load_startup(self, model: str | Path | None = None) -> None:
        """The model named on the command line (or opened from the file manager), else
        the last one used, else the bundled demo."""
        s = self.ctx.settings
        if model is not None:
            self.load(model)
        elif s.last_model and Path(s.last_model).exists():
            head = s.last_head if s.last_head and Path(s.last_head).exists() else None
            mmproj = s.last_mmproj if s.last_mmproj and Path(s.last_mmproj).exists() else None
            self.load(s.last_model, head, mmproj=mmproj)
        else:
            self.load(demo_model_path())

    def load_anyway(self) -> None:
        """Retry the last load without the memory check (the user's explicit override
        after a refusal)."""
        if self._last is not None:
            path, head, source, notes, mmproj = self._last
            self.load(path, head, source, notes=notes, fit="off", mmproj=mmproj)

    def reload(self, source: str) -> None:
        if self.path:
            self.load(self.path, self.head, source, mmproj=self.mmproj)

    def _on_finished(self, job: JobSignals, result: object, cancelled: bool) -> None:
        if job is not self._job:  # a load replaced by a newer one
            return
        self._job = None
        if cancelled or not isinstance(result, ModelInfo):
            return
        self.current = result
        if self.path and Path(self.path).resolve() != demo_model_path().resolve():
            self.ctx.settings.last_model = self.path
            self.ctx.settings.last_head = self.head
            self.ctx.settings.last_mmproj = self.mmproj
        else:
            self.ctx.settings.last_model = None
            self.ctx.settings.last_head = None
            self.ctx.settings.last_mmproj = None
        self.loaded.emit(result)

    def _on_models_changed(self, models: dict) -> None:
        """The engine's loaded models changed (a load elsewhere replaced ours, or an
        unload): forget a model that is gone, and say so."""
        if self.current is not None and self.current.name not in models and self._job is None:
            self.current = None
            self.unloaded.emit()

    def _on_failed(self, job: JobSignals, error: object) -> None:
        if job is self._job:
            self._job = None
            self.current = None
            self.loadFailed.emit(error)
