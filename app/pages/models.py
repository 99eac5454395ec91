"""Models: the library on disk, Hugging Face search, and downloads.

Each remote file carries a badge saying how it would fit this machine, and an empty
library offers the models recommended for this machine (:mod:`app.pages.modelsfit`).

Downloads run as tasks with a row each: progress (bytes, rate, ETA), Pause (the partial
file is kept), Resume (continues where it stopped), Cancel (the partial is removed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, ModelController
from app.pages.modelsfit import FitBadges, RecommendedBox, show_badge
from app.tasks import Task
from app.widgets.page import page_layout
from engine.hub.library import EntryKind, LibraryError, MtpStatus
from engine.gguf.inspect import human_size
from engine.hub.download import discard_partial
from engine.hub.files import FileGroup
from engine.hub.remote import HubConfig


def hub_config(ctx: AppContext) -> HubConfig:
    return HubConfig.from_env(token=ctx.settings.hub_token or None)


@dataclass
class PullRequest:
    repo: str
    group: FileGroup
    head: FileGroup | None
    revision: str


class DownloadRow(QWidget):
    """One pull: progress, pause/resume, cancel.

    Signals:
        finished(object)   the PullResult when it completed
    """

    finished = Signal(object)

    def __init__(self, ctx: AppContext, req: PullRequest, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.req = req
        self.task: Task | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        head = f" + {req.head.name}" if req.head else ""
        self.title = QLabel(f"{req.repo}: {req.group.name}{head}")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.info = QLabel("waiting…")
        self.info.setObjectName("Hint")
        row = QHBoxLayout()
        row.addWidget(self.info, 1)
        self.pause_btn = QPushButton("Pause")
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setObjectName("Danger")
        row.addWidget(self.pause_btn)
        row.addWidget(self.cancel_btn)
        lay.addWidget(self.title)
        lay.addWidget(self.bar)
        lay.addLayout(row)
        self.pause_btn.clicked.connect(self.toggle_pause)
        self.cancel_btn.clicked.connect(self.cancel)
        self._discard = False
        self.state = "idle"

    def start(self) -> None:
        from engine.hub.pull import pull

        req, cfg, lib = self.req, hub_config(self.ctx), self.ctx.library
        head = f"{req.repo}:{req.head.name}" if req.head else None

        def work(report, cancel):
            return pull(cfg, lib, req.repo, file=req.group.name, revision=req.revision, head=head, progress=report, cancel=cancel)

        self.task = Task(work, name="pull")
        self.task.progress.connect(self._on_progress)
        self.task.succeeded.connect(self._on_done)
        self.task.failed.connect(self._on_failed)
        self.task.cancelled.connect(self._on_cancelled)
        self.state = "running"
        self.pause_btn.setText("Pause")
        self.info.setText("starting…")
        self.task.start()

    def toggle_pause(self) -> None:
        if self.state == "running" and self.task is not None:
            self.task.cancel()
        elif self.state == "paused":
            self.start()

    def cancel(self) -> None:
        self._discard = True
        if self.state == "running" and self.task is not None:
            self.task.cancel()
        else:
            self._on_cancelled()

    def _on_progress(self, p) -> None:
        self.bar.setValue(int(p.fraction * 1000))
        eta = f", {p.file.eta_s:.0f} s left" if p.file.eta_s is not None else ""
        self.info.setText(
            f"{p.file.filename}: {human_size(p.done)} of {human_size(p.total)} at {human_size(int(p.file.rate))}/s{eta}"
        )

    def _on_done(self, result) -> None:
        self.state = "done"
        self.bar.setValue(1000)
        self.info.setText("done: in the library" + (" (paired with its head)" if result.head else ""))
        self.pause_btn.setEnabled(False)
        self.cancel_btn.setEnabled(False)
        self.finished.emit(result)

    def _on_failed(self, error) -> None:
        self.state = "paused"
        self.pause_btn.setText("Retry")
        self.info.setText("failed; Retry resumes where it stopped")
        if self.ctx.messages is not None:
            self.ctx.messages.error("Download failed", error)

    def _on_cancelled(self) -> None:
        if self._discard:
            from engine.hub.download import Target

            for g in (self.req.group, self.req.head):
                for f in g.files if g else []:
                    t = Target(self.req.repo, f.path, self.req.revision, f.size, f.sha256, f.blob_id)
                    discard_partial(self.ctx.library.partial_dir, t)
            self.state = "cancelled"
            self.info.setText("cancelled; the partial download was removed")
            self.pause_btn.setEnabled(False)
            self.cancel_btn.setEnabled(False)
            self.bar.setValue(0)
        else:
            self.state = "paused"
            self.pause_btn.setText("Resume")
            self.info.setText("paused; Resume continues where it stopped")


class ModelsPage(QWidget):
    def __init__(self, ctx: AppContext, models: ModelController, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.models = models
        self.rows: list[DownloadRow] = []
        self._tasks: list[Task] = []
        self._groups: list[FileGroup] = []
        self._revision = "main"
        self._want_file: str | None = None  # the file to select once a repo opened from a recommendation lists
        self.badges = FitBadges(self)
        self.badges.badge.connect(self._on_badge)
        self._build()
        self.refresh()

    # ------------------------------------------------------------------- build
    def _build(self) -> None:
        lay = page_layout(self, "Models")
        split = QSplitter(Qt.Orientation.Vertical)

        lib_box = QGroupBox("Library")
        ll = QVBoxLayout(lib_box)
        self.table = QTableWidget(0, 6)
        self.table.setHorizontalHeaderLabels(["Model", "Quantization", "MTP", "Size", "Source", "Paired with"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
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
        row = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search GGUF models, e.g. qwen3.6 mtp")
        self.search_btn = QPushButton("Search")
        row.addWidget(self.query, 1)
        row.addWidget(self.search_btn)
        hl.addLayout(row)
        self.hub_hint = QLabel("Search to list repositories; pick one to see its GGUF files, then a file to read its header.")
        self.hub_hint.setObjectName("Hint")
        hl.addWidget(self.hub_hint)
        lists = QHBoxLayout()
        self.repos = QListWidget()
        self.files = QListWidget()
        lists.addWidget(self.repos, 1)
        lists.addWidget(self.files, 1)
        hl.addLayout(lists, 1)
        row = QHBoxLayout()
        self.file_info = QLabel("")
        self.file_info.setObjectName("Hint")
        self.file_info.setWordWrap(True)
        row.addWidget(self.file_info, 1)
        self.pull_btn = QPushButton("Download")
        self.pull_head_btn = QPushButton("Download with MTP head")
        self.pull_btn.setObjectName("Primary")
        row.addWidget(self.pull_head_btn)
        row.addWidget(self.pull_btn)
        hl.addLayout(row)
        self.downloads = QVBoxLayout()
        hl.addLayout(self.downloads)
        split.addWidget(hub_box)
        lay.addWidget(split, 1)

        self.table.itemSelectionChanged.connect(self._show_details)
        self.load_btn.clicked.connect(self.load_selected)
        self.import_btn.clicked.connect(self.import_dialog)
        self.delete_btn.clicked.connect(self.delete_selected)
        self.search_btn.clicked.connect(self.search)
        self.query.returnPressed.connect(self.search)
        self.repos.currentItemChanged.connect(self._on_repo)
        self.files.currentItemChanged.connect(self._on_file)
        self.recommended.openRepo.connect(self.open_repo)
        self.pull_btn.clicked.connect(lambda: self.pull(with_head=False))
        self.pull_head_btn.clicked.connect(lambda: self.pull(with_head=True))
        self._update_buttons()

    # ---------------------------------------------------------------- library
    def refresh(self) -> None:
        entries = self.ctx.library.entries()
        self.table.setRowCount(len(entries))
        for r, e in enumerate(entries):
            src = e.provenance.get("repo") or Path(e.provenance.get("path", "")).name or e.provenance.get("source", "")
            pair = e.pair or ""
            quant = e.summary.get("quantization") or e.summary.get("main_quant_type") or ""
            for c, text in enumerate([e.name, quant, e.mtp, human_size(e.size), src, pair]):
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
        self.total.setText(f"{len(entries)} model(s), {human_size(sum(e.size for e in entries))} in {self.ctx.library.root}")
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
        s = e.summary
        rows = [("Architecture", s.get("architecture")), ("Quantization", s.get("quantization") or s.get("main_quant_type")),
                ("Parameters", f"{(s.get('parameters') or 0) / 1e6:.1f} M"), ("Context", s.get("context_length")),
                ("Blocks", s.get("block_count")), ("NextN layers", s.get("nextn_layers")), ("MTP", e.mtp),
                ("Files", "<br>".join(e.files)), ("Source", e.provenance.get("repo") or e.provenance.get("path")),
                ("Revision", (e.provenance.get("revision") or "")[:12])]  # fmt: skip
        self.details.setHtml(
            f"<b>{e.name}</b><table>" + "".join(f"<tr><td><i>{k}</i>&nbsp;</td><td>{v}</td></tr>" for k, v in rows if v) + "</table>"
        )

    def _update_buttons(self) -> None:
        e = self.selected()
        self.load_btn.setEnabled(e is not None and e.kind != EntryKind.HEAD)
        self.delete_btn.setEnabled(e is not None)
        g = self._current_group()
        self.pull_btn.setEnabled(g is not None and not g.head and g.complete)
        self.pull_head_btn.setEnabled(g is not None and not g.head and g.complete and any(x.head for x in self._groups))

    def load_selected(self) -> None:
        e = self.selected()
        if e is None:
            return
        lib = self.ctx.library
        head = None
        notes: tuple[str, ...] = ()
        if e.pair:
            try:
                head = lib.get(e.pair).path(lib.root)
            except LibraryError as err:  # the paired head was deleted or its record is broken
                notes = (f"loaded without its MTP head: {err}",)
        source = "external" if head is not None and e.mtp == MtpStatus.NONE else None
        self.models.load(e.path(lib.root), head, source, notes=notes)
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
        task.succeeded.connect(lambda e: (self.refresh(), self.ctx.messages and self.ctx.messages.status(f"Imported {e.name}")))
        task.failed.connect(lambda err: self.ctx.messages and self.ctx.messages.error("Import failed", err))
        self._track(task)
        return task.start()

    def delete_selected(self, *, confirm: bool = True) -> None:
        e = self.selected()
        if e is None:
            return
        if confirm:
            answer = QMessageBox.question(self, "Delete model", f"Delete {e.name} ({human_size(e.size)}) from the library?")
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.ctx.library.delete(e.id)
        self.refresh()
        if self.ctx.messages is not None:
            self.ctx.messages.status(f"Deleted {e.name}")

    def showEvent(self, event) -> None:
        super().showEvent(event)
        # checked once, when first seen with an empty library (it reads remote headers;
        # Check again repeats it)
        if not self.ctx.library.entries() and not self.recommended.started:
            self.recommended.start()

    # -------------------------------------------------------------------- hub
    def _track(self, task: Task) -> None:
        self._tasks.append(task)
        task.done.connect(lambda t=task: self._tasks.remove(t) if t in self._tasks else None)

    def search(self) -> None:
        from engine.hub.remote import search

        q = self.query.text().strip()
        if not q:
            return
        cfg = hub_config(self.ctx)
        task = Task(lambda report, cancel: search(cfg, q), name="search")
        task.succeeded.connect(self._show_repos)
        task.failed.connect(lambda err: self.ctx.messages and self.ctx.messages.error("Search failed", err))
        self.search_btn.setEnabled(False)
        task.done.connect(lambda: self.search_btn.setEnabled(True))
        self._track(task)
        task.start()

    def _show_repos(self, hits) -> None:
        self.repos.clear()
        for h in hits:
            item = QListWidgetItem(f"{h.repo_id}   ({h.downloads:,} downloads)")
            item.setData(Qt.ItemDataRole.UserRole, h.repo_id)
            self.repos.addItem(item)
        if not hits:
            self.repos.addItem("no GGUF repos found")

    def _on_repo(self, item, _prev=None) -> None:
        from engine.hub.remote import list_gguf

        repo = item.data(Qt.ItemDataRole.UserRole) if item else None
        if not repo:
            return
        self.badges.cancel()
        cfg = hub_config(self.ctx)
        task = Task(lambda report, cancel: list_gguf(cfg, repo), name="list")
        task.succeeded.connect(lambda res, r=repo: self._show_files(r, *res))
        task.failed.connect(lambda err: self.ctx.messages and self.ctx.messages.error("Listing failed", err))
        self._track(task)
        task.start()

    def _show_files(self, repo: str, revision: str, groups: list[FileGroup]) -> None:
        self._repo, self._revision, self._groups = repo, revision, groups
        self.files.clear()
        for g in groups:
            tags = []
            if g.head:
                tags.append("MTP head")
            if len(g.files) > 1:
                tags.append(f"{len(g.files)} shards")
            if not g.complete:
                tags.append(f"INCOMPLETE: {len(g.files)} of {g.expected_shards}")
            text = f"{g.quant or '?':<8} {human_size(g.size):>10}  {g.name}" + (f"  [{', '.join(tags)}]" if tags else "")
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, g.name)
            item.setData(Qt.ItemDataRole.UserRole + 1, text)
            self.files.addItem(item)
        want, self._want_file = self._want_file, None
        if want is not None and (wanted := self._file_item(want)) is not None:
            self.files.setCurrentItem(wanted)
        self._update_buttons()
        self.badges.start(hub_config(self.ctx), self.ctx, repo, revision, groups)

    def _on_badge(self, name: str, outcome: object) -> None:
        item = self._file_item(name)
        if item is not None:  # None: the list moved on to another repo meanwhile
            show_badge(item, outcome)

    def _file_item(self, name: str) -> QListWidgetItem | None:
        return next((self.files.item(i) for i in range(self.files.count())
                     if self.files.item(i).data(Qt.ItemDataRole.UserRole) == name), None)  # fmt: skip

    def open_repo(self, repo: str, file: str | None = None) -> None:
        """Show ``repo`` as the one search hit and list its files (selecting ``file``)."""
        self._want_file = file
        self.repos.clear()
        item = QListWidgetItem(repo)
        item.setData(Qt.ItemDataRole.UserRole, repo)
        self.repos.addItem(item)
        self.repos.setCurrentRow(0)

    def _current_group(self) -> FileGroup | None:
        item = self.files.currentItem()
        name = item.data(Qt.ItemDataRole.UserRole) if item else None
        return next((g for g in self._groups if g.name == name), None)

    def _on_file(self, item, _prev=None) -> None:
        from engine.hub.remote import read_remote_header

        self._update_buttons()
        g = self._current_group()
        if g is None:
            return
        cfg, repo, rev, path = hub_config(self.ctx), self._repo, self._revision, g.files[0].path
        self.file_info.setText("reading the header…")
        task = Task(lambda report, cancel: read_remote_header(cfg, repo, path, rev), name="header")
        task.succeeded.connect(self._show_header)
        task.failed.connect(lambda err: self.file_info.setText(f"header not readable: {err}"))
        self._track(task)
        task.start()

    def _show_header(self, h: dict) -> None:
        mtp = {"none": "no MTP layers", "integrated": "integrated MTP (NextN) layers", "head-only": "an MTP head"}[h["mtp"]]
        self.file_info.setText(f"{h['architecture']}, context {h['context_length']}, {h['block_count']} blocks, {mtp}")

    def pull(self, *, with_head: bool) -> DownloadRow | None:
        g = self._current_group()
        if g is None:
            return None
        head = next((x for x in self._groups if x.head), None) if with_head else None
        row = DownloadRow(self.ctx, PullRequest(self._repo, g, head, self._revision), self)
        row.finished.connect(lambda _res: self.refresh())
        self.downloads.addWidget(row)
        self.rows.append(row)
        row.start()
        return row
