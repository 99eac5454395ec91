"""Models: the library on disk, Hugging Face search, and downloads.

The page composes the library (its table, details, Load, Import, Delete) with the
Hugging Face browser (:mod:`app.pages.hubbrowser`: search, files, fit badges) and the
downloads it starts (:mod:`app.pages.downloads`); an empty library offers the models
recommended for this machine (:mod:`app.pages.modelsfit`). GUI thread; the work runs in
tasks (:mod:`app.tasks`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, ModelController
from app.pages.downloads import DownloadRow, Downloads, hub_config
from app.pages.hubbrowser import HubBrowser
from app.pages.modelsfit import RecommendedBox
from app.tasks import Task
from app.widgets.page import page_layout
from engine.facade import human_size
from engine.facade import EntryKind


def _answers(path: Path) -> str | None:
    """What a model answers, from its header: chat (with tools, thinking), embeddings or
    reranking (engine.runtime.ondemand.catalog)."""
    from engine.facade import MtpStudioError
    from engine.facade import CHAT, EMBEDDING, header_facts

    try:
        facts = header_facts(path)
    except MtpStudioError:
        return None
    if facts.kind == CHAT:
        return "chat" + (f" ({', '.join(facts.template_caps)})" if facts.template_caps else "")
    return "embeddings" if facts.kind == EMBEDDING else "reranking"


#: what a projector's modalities let a model read, in the library's "Sees" column
_SEES = {"vision": "images", "audio": "audio"}


def sees(projector, entry) -> str:
    """What ``entry`` reads besides text: for a model, through its projector ``projector``
    (an entry, None: text only); for a projector, what it reads for its model."""
    facts = projector.facts if projector is not None else entry.facts if entry.kind == EntryKind.PROJECTOR else None
    if facts is None:
        return ""
    return ", ".join(_SEES.get(m, m) for m in facts.modalities) or "images"


class ModelsPage(QWidget):
    def __init__(self, ctx: AppContext, models: ModelController, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.models = models
        self._tasks: list[Task] = []
        self._build()
        self.refresh()

    # ------------------------------------------------------------------- build
    def _build(self) -> None:
        lay = page_layout(self, "Models")
        split = QSplitter(Qt.Orientation.Vertical)

        lib_box = QGroupBox("Library")
        ll = QVBoxLayout(lib_box)
        self.table = QTableWidget(0, 8)
        self.table.setHorizontalHeaderLabels(
            ["Model", "Quantization", "MTP", "Size", "Source", "Paired with", "State", "Sees"]
        )
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2, 3, 6, 7):  # short words: as wide as they need, the name takes the rest
            self.table.horizontalHeader().setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.empty = QLabel("No models yet: search Hugging Face below, or import a GGUF file.")
        self.empty.setObjectName("Empty")
        self.details = QTextBrowser()
        self.details.setMaximumWidth(340)
        self.details.setPlaceholderText("Select a model to see its details.")
        top = QHBoxLayout()
        left = QVBoxLayout()
        left.addWidget(self.table, 1)
        left.addWidget(self.empty)
        self.recommended = RecommendedBox(self.ctx, lambda: hub_config(self.ctx))
        left.addWidget(self.recommended, 1)
        top.addLayout(left, 1)
        top.addWidget(self.details)
        ll.addLayout(top, 1)
        row = QHBoxLayout()
        self.total = QLabel("")
        self.total.setObjectName("Hint")
        row.addWidget(self.total, 1)
        self.load_btn = QPushButton("Load")
        self.load_btn.setObjectName("Primary")
        self.import_btn = QPushButton("Import file…")
        self.delete_btn = QPushButton("Delete…")
        self.delete_btn.setObjectName("Danger")
        for b in (self.import_btn, self.delete_btn, self.load_btn):
            row.addWidget(b)
        ll.addLayout(row)
        split.addWidget(lib_box)

        hub_box = QGroupBox("Hugging Face")
        hl = QVBoxLayout(hub_box)
        self.hub = h = HubBrowser(self.ctx)
        self.downloads = Downloads(self.ctx)
        hl.addWidget(h, 1)
        hl.addWidget(self.downloads)
        # the parts' widgets, by the names the page's users know them by
        self.query, self.search_btn, self.repos, self.files = h.query, h.search_btn, h.repos, h.files
        self.file_info, self.pull_btn, self.pull_head_btn = h.file_info, h.pull_btn, h.pull_head_btn
        self.pull_vision_btn = h.pull_vision_btn
        self.rows: list[DownloadRow] = self.downloads.rows
        split.addWidget(hub_box)
        lay.addWidget(split, 1)

        self.table.itemSelectionChanged.connect(self._show_details)
        self.load_btn.clicked.connect(self.load_selected)
        self.import_btn.clicked.connect(self.import_dialog)
        self.delete_btn.clicked.connect(self.delete_selected)
        self.recommended.openRepo.connect(self.open_repo)
        self.hub.download.connect(self.downloads.add)
        self.downloads.finished.connect(lambda _res: self.refresh())
        # loads and unloads from anywhere (this page, the chat, the endpoint's on-demand loads)
        self.ctx.bridge.modelsChanged.connect(lambda _models: self.refresh())
        self._update_buttons()

    # ---------------------------------------------------------------- library
    def loaded_name(self, e) -> str | None:
        """The name ``e`` is loaded as now (by its file), None when it is not loaded."""
        path = str(e.path(self.ctx.library.root))
        return next((n for n, info in self.ctx.bridge.models().items() if info.path == path), None)

    def refresh(self) -> None:
        entries = self.ctx.library.entries()
        by_id = {e.id: e for e in entries}
        self.table.setRowCount(len(entries))
        for r, e in enumerate(entries):
            src = e.origin.label
            pair = e.pair or ""
            quant = e.facts.quantization
            state = "loaded" if self.loaded_name(e) is not None else ""
            seen = sees(by_id.get(e.projector) if e.projector else None, e)
            mtp = "" if e.kind == EntryKind.PROJECTOR else e.mtp
            for c, text in enumerate([e.name, quant, mtp, human_size(e.size), src, pair, state, seen]):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, e.id)
                self.table.setItem(r, c, item)
        self.empty.setVisible(not entries)
        self.table.setVisible(bool(entries))
        self.recommended.setVisible(not entries)
        if entries:
            self.recommended.cancel()
        elif self.isVisible() and not self.recommended.started:  # the last model was deleted
            self.recommended.start()
        self.total.setText(
            f"{len(entries)} model(s), {human_size(sum(e.size for e in entries))} in {self.ctx.library.root}"
        )
        self._update_buttons()

    def selected(self):
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        eid = self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)
        return next((e for e in self.ctx.library.entries() if e.id == eid), None)

    def _show_details(self) -> None:
        e = self.selected()
        self._update_buttons()
        if e is None:
            self.details.setHtml("")
            return
        s, origin = e.facts, e.origin
        projector = e.kind == EntryKind.PROJECTOR
        rows = [
            ("Answers", None if projector else _answers(e.path(self.ctx.library.root))),
            ("Loaded", "yes" if self.loaded_name(e) else None),
            ("Architecture", s.architecture),
            ("Quantization", s.quantization),
            ("Parameters", f"{s.parameters / 1e6:.1f} M"),
            ("Context", s.context_length),
            ("Blocks", s.block_count),
            ("NextN layers", s.nextn_layers),
            ("MTP", None if projector else e.mtp),
            ("Sees", sees(self.ctx.library.projector_of(e), e)),
            ("Projector for", f"models {s.output_width} wide" if projector else None),
            ("Files", "<br>".join(e.files)),
            ("Source", origin.repo or origin.path),
            ("Revision", (origin.revision or "")[:12]),
        ]
        self.details.setHtml(
            f"<b>{e.name}</b><table>"
            + "".join(f"<tr><td><i>{k}</i>&nbsp;</td><td>{v}</td></tr>" for k, v in rows if v)
            + "</table>"
        )

    def _update_buttons(self) -> None:
        e = self.selected()
        self.load_btn.setEnabled(e is not None and e.kind not in (EntryKind.HEAD, EntryKind.PROJECTOR))
        self.load_btn.setText("Unload" if e is not None and self.loaded_name(e) is not None else "Load")
        self.delete_btn.setEnabled(e is not None)

    def load_selected(self) -> None:
        """Load the selected model, or unload it when it is loaded (in the window or by the
        endpoint on demand)."""
        e = self.selected()
        if e is None:
            return
        if (name := self.loaded_name(e)) is not None:
            from engine.facade import J

            self.ctx.bridge.run(J.UnloadModel(name))
            if self.ctx.messages is not None:
                self.ctx.messages.status(f"Unloading {e.name}…")
            return
        self.models.load_entry(e)
        if self.ctx.messages is not None:
            self.ctx.messages.status(f"Loading {e.name}…")

    def import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)")
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path) -> Task:
        lib = self.ctx.library

        def work(report, cancel):
            return lib.import_file(path, progress=lambda done, total: report((done, total)), cancel=cancel)

        task = Task(work, name="import")
        task.succeeded.connect(
            lambda e: (self.refresh(), self.ctx.messages and self.ctx.messages.status(f"Imported {e.name}"))
        )
        task.failed.connect(lambda err: self.ctx.messages and self.ctx.messages.error("Import failed", err))
        self._track(task)
        return task.start()

    def delete_selected(self, *, confirm: bool = True) -> None:
        e = self.selected()
        if e is None:
            return
        if confirm:
            answer = QMessageBox.question(
                self, "Delete model", f"Delete {e.name} ({human_size(e.size)}) from the library?"
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.ctx.library.delete(e.id)
        self.refresh()
        if self.ctx.messages is not None:
            self.ctx.messages.status(f"Deleted {e.name}")

    def _track(self, task: Task) -> None:
        self._tasks.append(task)
        task.done.connect(lambda t=task: self._tasks.remove(t) if t in self._tasks else None)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        # checked once, when first seen with an empty library (it reads remote headers;
        # Check again repeats it)
        if not self.ctx.library.entries() and not self.recommended.started:
            self.recommended.start()

    # -------------------------------------------------------------------- hub
    def open_repo(self, repo: str, file: str | None = None) -> None:
        """Show ``repo`` in the Hugging Face browser and list its files (selecting ``file``)."""
        self.hub.open_repo(repo, file)

    def pull(self, *, with_head: bool, with_vision: bool = False) -> DownloadRow | None:
        """Download the file picked in the browser (with the repo's MTP head, or with its
        projector)."""
        req = self.hub.pull_request(with_head=with_head, with_vision=with_vision)
        return None if req is None else self.downloads.add(req)
