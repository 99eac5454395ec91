"""The main window: navigation, the six pages, the status bar with the loaded model."""

from __future__ import annotations

from PySide6.QtCore import QByteArray
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMainWindow,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, ModelController
from app.endpoint import Endpoint
from app.messages import Messages
from app.pages.backend import BackendPage
from app.pages.chat.page import ChatPage
from app.pages.chat.figures import context_line
from app.pages.compose import ComposePage
from app.pages.models import ModelsPage
from app.pages.performance import PerformancePage
from app.pages.server import ServerPage
from app.resources import app_icon
from engine.facade import InsufficientMemoryError
from engine.facade import ModelInfo

PAGES = ("chat", "models", "compose", "performance", "backend", "server")
TITLES = {
    "chat": "Chat",
    "models": "Models",
    "compose": "Compose",
    "performance": "Performance",
    "backend": "Backend",
    "server": "Server",
}


class MainWindow(QMainWindow):
    def __init__(self, ctx: AppContext, endpoint: Endpoint):
        super().__init__()
        self.ctx = ctx
        #: the local HTTP endpoint (app.endpoint): the Server page shows it; stopped when the window closes
        self.endpoint = endpoint
        self.setWindowTitle("MTP Studio")
        self.setWindowIcon(app_icon())
        self.resize(1200, 800)
        ctx.messages = Messages(self, self.statusBar())
        self.models = ModelController(ctx, self)
        self.model_label = QLabel("no model")
        self.model_label.setObjectName("Hint")
        self.statusBar().addPermanentWidget(self.model_label)
        #: said once, for as long as it holds: this CPU's repacked kernels crash, so they are off
        self.repack_label = QLabel("repacking off on this CPU")
        self.repack_label.setObjectName("Hint")
        self.repack_label.setVisible(False)
        self.statusBar().addPermanentWidget(self.repack_label)

        self.nav = QListWidget()
        self.nav.setObjectName("Nav")
        self.nav.setFixedWidth(190)
        self.stack = QStackedWidget()
        # built eagerly: the Performance page must see every reply from the start
        self.pages = {
            "chat": ChatPage(ctx, self.models),
            "models": ModelsPage(ctx, self.models),
            "compose": ComposePage(ctx, self.models),
            "performance": PerformancePage(ctx, self.models),
            "backend": BackendPage(ctx, self.models),
            "server": ServerPage(ctx, endpoint),
        }
        for i, key in enumerate(PAGES):
            self.nav.addItem(TITLES[key])
            self.stack.addWidget(self.pages[key])
            sc = QShortcut(QKeySequence(f"Ctrl+{i + 1}"), self)
            sc.activated.connect(lambda k=key: self.show_page(k))
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.pages["chat"].findProjector.connect(self.find_projector)

        side = QWidget()
        side.setFixedWidth(190)
        sl = QVBoxLayout(side)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.setSpacing(0)
        brand = QLabel("MTP Studio")
        brand.setObjectName("Brand")
        sub = QLabel("MTP speculative decoding")
        sub.setObjectName("BrandSub")
        sl.addWidget(brand)
        sl.addWidget(sub)
        sl.addWidget(self.nav, 1)
        central = QWidget()
        cl = QHBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(side)
        cl.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        self.models.loading.connect(lambda name: self.model_label.setText(f"loading {name}…"))
        self.models.progress.connect(lambda f, m: self.model_label.setText(f"{m} {f * 100:.0f}%"))
        self.models.loaded.connect(self._on_loaded)
        self.models.loadFailed.connect(self._on_load_failed)
        self.models.unloaded.connect(lambda: self.model_label.setText("no model loaded"))
        self.models.notice.connect(lambda text: self.ctx.messages.status(text, 10000))  # type: ignore[union-attr]
        w = ctx.settings.window
        if w.geometry:
            self.restoreGeometry(QByteArray.fromBase64(w.geometry.encode()))
        self.show_page(w.page if w.page in PAGES else "chat")

    def show_page(self, key: str) -> None:
        self.nav.setCurrentRow(PAGES.index(key))

    def find_projector(self) -> None:
        """The chat's "Find its projector…": the Models page's Hugging Face browser on the
        loaded model's repository when the library knows where it came from, else its
        search box holding the model's name."""
        self.show_page("models")
        info, page = self.models.current, self.pages["models"]
        if info is None:
            return
        repo = None
        try:
            entry = next(
                (e for e in self.ctx.library.entries() if str(e.path(self.ctx.library.root)) == info.path), None
            )
            repo = entry.origin.repo if entry is not None else None
        except Exception:  # an unreadable library: the search box instead (the Models page says why)
            entry = None
        if repo:
            page.open_repo(repo)
            where = f"the files of {repo} are listed"
        else:
            page.query.setText(info.name)
            page.query.setFocus()
            where = "search for it"
        self.ctx.messages.status(  # type: ignore[union-attr]
            f"{info.name} sees images with its projector (an mmproj GGUF): {where}, pick the model's file and "
            "Download with vision, then load it",
            15000,
        )

    @property
    def current_page(self) -> str:
        return PAGES[self.stack.currentIndex()]

    def _on_loaded(self, info: ModelInfo) -> None:
        pool = f" · {len(info.rpc)} RPC server{'s' if len(info.rpc) > 1 else ''}" if info.rpc else ""
        self.model_label.setText(f"{info.name} · MTP {info.mtp} · ctx {info.n_ctx}{pool}")
        notice = info.repack_notice
        self.repack_label.setVisible(bool(notice))
        self.repack_label.setToolTip(notice or "")
        notes = list(self.models.notes)
        if info.context_lowered:
            notes.insert(0, context_line(info))
        if info.fallbacks:  # in the load line, never a dialog: the load went on safely
            found = "with a fallback: " if info.fallbacks_found_now else "with a fallback found earlier: "
            notes.append(found + " ".join(info.fallbacks))
        if info.mtp_off_reason:
            notes.append(info.mtp_off_reason)
        text = "; ".join(notes)
        said = f"Loaded {info.name}" + (f" — {text}" if text else "")
        self.ctx.messages.status(said, 15000 if text else 5000)  # type: ignore[union-attr]

    def _on_load_failed(self, error) -> None:
        self.model_label.setText("no model loaded")
        if isinstance(error, InsufficientMemoryError):  # the user may know better: offer the override
            self.ctx.messages.error(
                "The model does not fit in memory",
                error,  # type: ignore[union-attr]
                action=("Load anyway", self.models.load_anyway),
            )
            return
        self.ctx.messages.error("The model could not be loaded", error)  # type: ignore[union-attr]

    def closeEvent(self, event) -> None:
        chat = self.pages["chat"]
        if chat.job is not None:
            chat.stop()
        self.endpoint.stop()
        self.pages["backend"].rpc.stop_serving()
        w = self.ctx.settings.window
        w.geometry = bytes(self.saveGeometry().toBase64()).decode()
        w.page = self.current_page
        self.ctx.save_settings()
        super().closeEvent(event)
