"""The Models page's Hugging Face browser: search for GGUF repositories, list a
repository's files (quantization, size, shards, MTP heads, projectors), read the picked
file's header, and ask for a download of it (with its MTP head, or with its projector so
that it reads images, when the repo has one).

Each remote file carries a badge saying how it would fit this machine
(:class:`app.pages.modelsfit.FitBadges`). The requests run as tasks (:mod:`app.tasks`)
on worker threads; the widget lives on the GUI thread and only shows their outcomes.

Signals:
    download(object)   Download was pressed: a :class:`app.pages.downloads.PullRequest`
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.pages.downloads import PullRequest, hub_config
from app.pages.modelsfit import FitBadges, show_badge
from app.tasks import Task
from engine.facade import human_size
from engine.facade.hub import FileGroup, HeaderFacts, ProjectorFacts, head_for, modality_hint, projector_for


def projector_tag(modalities: tuple[str, ...]) -> str:
    """A projector's tag in the files list: what it reads, when its name or header says."""
    return f"{' + '.join(modalities)} projector" if modalities else "projector"


class HubBrowser(QWidget):
    download = Signal(object)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self._tasks: list[Task] = []
        self._groups: list[FileGroup] = []
        self._revision = "main"
        self._want_file: str | None = None  # the file to select once a repo opened from a recommendation lists
        self.badges = FitBadges(self)
        self.badges.badge.connect(self._on_badge)
        self._build()

    def _build(self) -> None:
        hl = QVBoxLayout(self)
        hl.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search GGUF models, e.g. qwen3.6 mtp")
        self.search_btn = QPushButton("Search")
        row.addWidget(self.query, 1)
        row.addWidget(self.search_btn)
        hl.addLayout(row)
        self.hint = QLabel(
            "Search to list repositories; pick one to see its GGUF files, then a file to read its header."
        )
        self.hint.setObjectName("Hint")
        hl.addWidget(self.hint)
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
        self.pull_vision_btn = QPushButton("Download with vision")
        self.pull_btn.setObjectName("Primary")
        row.addWidget(self.pull_head_btn)
        row.addWidget(self.pull_vision_btn)
        row.addWidget(self.pull_btn)
        hl.addLayout(row)

        self.search_btn.clicked.connect(self.search)
        self.query.returnPressed.connect(self.search)
        self.repos.currentItemChanged.connect(self._on_repo)
        self.files.currentItemChanged.connect(self._on_file)
        self.pull_btn.clicked.connect(lambda: self._ask_download(with_head=False))
        self.pull_head_btn.clicked.connect(lambda: self._ask_download(with_head=True))
        self.pull_vision_btn.clicked.connect(lambda: self._ask_download(with_head=False, with_vision=True))
        self._update_buttons()

    def _track(self, task: Task) -> None:
        self._tasks.append(task)
        task.done.connect(lambda t=task: self._tasks.remove(t) if t in self._tasks else None)

    # ----------------------------------------------------------------- search
    def search(self) -> None:
        from engine.facade.hub import search

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

    def open_repo(self, repo: str, file: str | None = None) -> None:
        """Show ``repo`` as the one search hit and list its files (selecting ``file``)."""
        self._want_file = file
        self.repos.clear()
        item = QListWidgetItem(repo)
        item.setData(Qt.ItemDataRole.UserRole, repo)
        self.repos.addItem(item)
        self.repos.setCurrentRow(0)

    # ------------------------------------------------------------------ files
    def _on_repo(self, item, _prev=None) -> None:
        from engine.facade.hub import list_gguf

        repo = item.data(Qt.ItemDataRole.UserRole) if item else None
        if not repo:
            return
        self.badges.cancel()
        cfg = hub_config(self.ctx)
        task = Task(lambda report, cancel: list_gguf(cfg, repo), name="list")
        task.succeeded.connect(lambda res, r=repo: self.show_files(r, *res))
        task.failed.connect(lambda err: self.ctx.messages and self.ctx.messages.error("Listing failed", err))
        self._track(task)
        task.start()

    def show_files(self, repo: str, revision: str, groups: list[FileGroup]) -> None:
        """List ``repo``'s file groups at ``revision`` (and start their fit badges)."""
        self._repo, self._revision, self._groups = repo, revision, groups
        self.files.clear()
        for g in groups:
            tags = []
            if g.head:
                tags.append("MTP head")
            if g.projector:
                tags.append(projector_tag(modality_hint(g.name)))
            if len(g.files) > 1:
                tags.append(f"{len(g.files)} shards")
            if not g.complete:
                tags.append(f"INCOMPLETE: {len(g.files)} of {g.expected_shards}")
            text = f"{g.quant or '?':<8} {human_size(g.size):>10}  {g.name}" + (
                f"  [{', '.join(tags)}]" if tags else ""
            )
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, g.name)
            item.setData(Qt.ItemDataRole.UserRole + 1, text)
            self.files.addItem(item)
        want, self._want_file = self._want_file, None
        if want is not None and (wanted := self.file_item(want)) is not None:
            self.files.setCurrentItem(wanted)
        self._update_buttons()
        self.badges.start(hub_config(self.ctx), self.ctx, repo, revision, groups)

    def _on_badge(self, name: str, outcome: object) -> None:
        item = self.file_item(name)
        if item is not None:  # None: the list moved on to another repo meanwhile
            show_badge(item, outcome)

    def file_item(self, name: str) -> QListWidgetItem | None:
        """The files list's item of the group ``name`` (None: not listed)."""
        return next(
            (
                self.files.item(i)
                for i in range(self.files.count())
                if self.files.item(i).data(Qt.ItemDataRole.UserRole) == name
            ),
            None,
        )

    def _current_group(self) -> FileGroup | None:
        item = self.files.currentItem()
        name = item.data(Qt.ItemDataRole.UserRole) if item else None
        return next((g for g in self._groups if g.name == name), None)

    def _on_file(self, item, _prev=None) -> None:
        from engine.facade.hub import read_remote_header, read_remote_projector

        self._update_buttons()
        g = self._current_group()
        if g is None:
            return
        cfg, repo, rev, path = hub_config(self.ctx), self._repo, self._revision, g.files[0].path
        self.file_info.setText("reading the header…")
        if g.projector:
            task = Task(lambda report, cancel: read_remote_projector(cfg, repo, path, rev), name="header")
            task.succeeded.connect(lambda facts, name=g.name: self._show_projector(name, facts))
        else:
            task = Task(lambda report, cancel: read_remote_header(cfg, repo, path, rev), name="header")
            task.succeeded.connect(self._show_header)
        task.failed.connect(lambda err: self.file_info.setText(f"header not readable: {err}"))
        self._track(task)
        task.start()

    def _show_header(self, h: HeaderFacts) -> None:
        mtp = {
            "none": "no MTP layers",
            "integrated": "integrated MTP (NextN) layers",
            "head-only": "an MTP head",
            "assistant": "an MTP drafter (assistant) for another model",
            "trunk-only": "a trunk whose MTP head ships apart",
        }[h.mtp]
        self.file_info.setText(f"{h.architecture}, context {h.context_length}, {h.block_count} blocks, {mtp}")

    def _show_projector(self, name: str, p: ProjectorFacts) -> None:
        """A projector's header: what it reads (its tag in the list follows the header), and
        the width of the models it is made for."""
        tag, kinds = projector_tag(p.modalities), " + ".join(t for t in (p.projector_type, p.audio_projector_type) if t)
        self.file_info.setText(
            f"{'an' if tag[0] in 'aeiou' else 'a'} {tag} ({kinds}): its output is {p.output_width} wide, so it "
            f"works with a model whose embedding width is {p.output_width}; download it with its model"
        )
        item = self.file_item(name)
        text = item.data(Qt.ItemDataRole.UserRole + 1) if item is not None else None
        if text and p.modalities:
            text = text.replace(projector_tag(modality_hint(name)) + "]", projector_tag(p.modalities) + "]")
            item.setData(Qt.ItemDataRole.UserRole + 1, text)
            item.setText(text)  # a projector's line has no fit badge under it

    # --------------------------------------------------------------- download
    def _update_buttons(self) -> None:
        g = self._current_group()
        self.pull_btn.setEnabled(g is not None and not g.head and not g.projector and g.complete)
        self.pull_btn.setToolTip(
            "A projector is downloaded with its model: pick the model, then Download with vision"
            if g is not None and g.projector
            else ""
        )
        head = head_for(self._groups, g) if g is not None and not g.head and not g.projector else None
        self.pull_head_btn.setEnabled(g is not None and g.complete and head is not None)
        self.pull_head_btn.setToolTip(f"Also downloads {head.name}" if head is not None else "")
        proj = projector_for(self._groups, g) if g is not None else None
        self.pull_vision_btn.setEnabled(g is not None and g.complete and proj is not None)
        self.pull_vision_btn.setToolTip(
            f"Also downloads {proj.name}, this repo's projector for the file: the model then reads images"
            if proj is not None
            else ""
        )

    def pull_request(self, *, with_head: bool, with_vision: bool = False) -> PullRequest | None:
        """The picked file to download, with the repo's MTP head or drafter made for it (by
        name, and checked on both headers before the download) and with its projector
        (chosen as llama.cpp's ``-hf`` does, its width checked on the headers); None: none
        picked."""
        g = self._current_group()
        if g is None:
            return None
        head = head_for(self._groups, g) if with_head else None
        projector = projector_for(self._groups, g) if with_vision else None
        return PullRequest(self._repo, g, head, self._revision, projector)

    def _ask_download(self, *, with_head: bool, with_vision: bool = False) -> None:
        req = self.pull_request(with_head=with_head, with_vision=with_vision)
        if req is not None:
            self.download.emit(req)
