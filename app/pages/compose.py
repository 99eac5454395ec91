"""Compose: put a separate MTP head into its target model, with a compatibility check
first, progress and cancel while writing, and the validation report after."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTextBrowser,
    QWidget,
)

from app.context import AppContext, ModelController
from app.messages import user_text
from app.tasks import Task
from app.widgets.page import page_layout
from engine.facade.hub import PairCheck, check_files, compose_into_library
from engine.facade import EntryKind, MtpStatus


class FilePicker(QWidget):
    """A combo of library files of one kind, plus Browse… and drag-and-drop."""

    def __init__(self, kind: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.kind = kind
        self.combo = QComboBox()
        self.combo.setMinimumWidth(360)
        self.browse = QPushButton("Browse…")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.combo, 1)
        lay.addWidget(self.browse)
        self.browse.clicked.connect(self._browse)
        self.setAcceptDrops(True)

    def fill(self, items: list[tuple[str, str]]) -> None:
        current = self.path()
        self.combo.clear()
        article = "an" if self.kind[0] in "aeiouAEIOUM" else "a"
        self.combo.addItem(f"Choose {article} {self.kind}…", "")
        for label, path in items:
            self.combo.addItem(label, path)
        if current:
            self.set_path(current)

    def set_path(self, path: str) -> None:
        i = self.combo.findData(path)
        if i < 0:
            self.combo.addItem(Path(path).name, path)
            i = self.combo.count() - 1
        self.combo.setCurrentIndex(i)

    def path(self) -> str:
        return self.combo.currentData() or ""

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, f"Choose the {self.kind}", str(Path.home()), "GGUF (*.gguf)")
        if path:
            self.set_path(path)

    def dragEnterEvent(self, event) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        urls = [u.toLocalFile() for u in event.mimeData().urls() if u.toLocalFile().endswith(".gguf")]
        if urls:
            self.set_path(urls[0])


class ComposePage(QWidget):
    def __init__(self, ctx: AppContext, models: ModelController, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.models = models
        self.task: Task | None = None  # composing
        self._checks: set[Task] = set()  # pair checks running (kept alive until done)
        self._checked: tuple[str, str] | None = None  # the (target, head) that passed
        self.result = None
        lay = page_layout(
            self,
            "Compose",
            intro="Some models ship their MTP head as a separate mtp-*.gguf file. Composing puts the head into the "
            "model: one file set that any llama.cpp build loads, without holding the embeddings twice. The model's "
            "own bytes are copied unchanged.",
        )
        box = QGroupBox("Inputs")
        grid = QGridLayout(box)
        self.target = FilePicker("target model")
        self.head = FilePicker("MTP head")
        grid.addWidget(QLabel("Target model"), 0, 0)
        grid.addWidget(self.target, 0, 1)
        grid.addWidget(QLabel("MTP head"), 1, 0)
        grid.addWidget(self.head, 1, 1)
        self.check = QLabel("Pick a target and a head (or drop the files here).")
        self.check.setWordWrap(True)
        grid.addWidget(self.check, 2, 0, 1, 2)
        lay.addWidget(box)
        row = QHBoxLayout()
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setVisible(False)
        row.addWidget(self.bar, 1)
        row.addStretch(1)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setEnabled(False)
        self.compose_btn = QPushButton("Compose into the library")
        self.compose_btn.setObjectName("Primary")
        self.compose_btn.setEnabled(False)
        self.load_btn = QPushButton("Load the composite")
        self.load_btn.setEnabled(False)
        for b in (self.cancel_btn, self.compose_btn, self.load_btn):
            row.addWidget(b)
        lay.addLayout(row)
        self.report = QTextBrowser()
        self.report.setPlaceholderText("The compose result and its validation report appear here.")
        lay.addWidget(self.report, 1)
        self.target.combo.currentIndexChanged.connect(self.check_inputs)
        self.head.combo.currentIndexChanged.connect(self.check_inputs)
        self.compose_btn.clicked.connect(self.compose)
        self.cancel_btn.clicked.connect(lambda: self.task.cancel() if self.task else None)
        self.load_btn.clicked.connect(self._load_result)
        self.refresh()

    def refresh(self) -> None:
        lib = self.ctx.library
        entries = lib.entries()
        self.target.fill(
            [(e.name, str(e.path(lib.root))) for e in entries if e.kind == EntryKind.MODEL and e.mtp == MtpStatus.NONE]
        )
        self.head.fill([(e.name, str(e.path(lib.root))) for e in entries if e.kind == EntryKind.HEAD])

    def showEvent(self, event) -> None:
        self.refresh()
        super().showEvent(event)

    def check_inputs(self) -> None:
        """Check the pair from the headers alone, off the GUI thread; the Compose button
        is enabled once the current pair passed."""
        t, h = self.target.path(), self.head.path()
        self.compose_btn.setEnabled(False)
        self._checked = None
        if not t or not h:
            self.check.setText("Pick a target and a head (or drop the files here).")
            return
        self.check.setText("Checking the pair…")
        pair = (t, h)
        task = Task(lambda _report, _cancel: check_files(Path(t), Path(h)), name="check")
        task.succeeded.connect(lambda result: self._checked_pair(pair, result))
        task.failed.connect(lambda error: self._pair_refused(pair, error))
        task.done.connect(lambda: self._checks.discard(task))
        self._checks.add(task)
        task.start()

    def _current(self) -> tuple[str, str]:
        return self.target.path(), self.head.path()

    def _checked_pair(self, pair: tuple[str, str], check: PairCheck) -> None:
        if pair != self._current():
            return  # the inputs changed while this ran; a newer check is on its way
        self._checked = pair
        note = "".join(f"<br>note: {w}" for w in check.warnings)
        self.check.setText(
            f"<span style='color:#1f8a5b'>Compatible: {check.architecture}, {check.trunk_layers} trunk blocks + "
            f"{check.nextn_layers} NextN block(s).</span>{note}"
        )
        self.compose_btn.setEnabled(self.task is None)

    def _pair_refused(self, pair: tuple[str, str], error: BaseException) -> None:
        if pair == self._current():
            self.check.setText(f"<span style='color:#b3261e'>Not compatible: {user_text(error)}</span>")

    def compose(self) -> Task | None:
        """Compose the checked pair into the library (None when the pair is not checked)."""
        if self.task is not None or self._checked is None or self._checked != self._current():
            return None
        lib = self.ctx.library
        target, head = (Path(p) for p in self._checked)
        self.task = Task(
            lambda report, cancel: compose_into_library(lib, target, head, progress=report, cancel=cancel),
            name="compose",
        )
        self.task.progress.connect(lambda f: self.bar.setValue(int(f * 1000)))
        self.task.succeeded.connect(self._done)
        self.task.failed.connect(self._failed)
        self.task.cancelled.connect(self._cancelled)
        self.task.done.connect(self._finished)
        self.bar.setVisible(True)
        self.bar.setValue(0)
        self.cancel_btn.setEnabled(True)
        self.compose_btn.setEnabled(False)
        self.report.setHtml("Composing…")
        return self.task.start()

    def _finished(self) -> None:
        self.task = None
        self.cancel_btn.setEnabled(False)
        self.bar.setVisible(False)
        self.check_inputs()

    def _done(self, value) -> None:
        res, entry = value
        self.result = entry
        v = res.validation
        lines = [
            f"<b style='color:#1f8a5b'>Composed {entry.name}</b>: {res.block_count} blocks, {res.nextn_layers} "
            f"NextN layer(s), "
            f"{res.tensors_added} tensors added, {len(res.outputs)} file(s). It is in the library.",
            f"Validation: {'passed' if v.valid else 'FAILED'} ({len(v.errors)} errors, {len(v.warnings)} warnings)",
        ]
        lines += [f"warning: {w}" for w in res.warnings]
        self.report.setHtml("<br>".join(lines))
        self.load_btn.setEnabled(True)
        if self.ctx.messages is not None:
            self.ctx.messages.status(f"Composed {entry.name}")

    def _failed(self, error) -> None:
        self.report.setHtml(
            f"<b style='color:#b3261e'>Compose failed</b><br>{user_text(error)}<br>Nothing was written."
        )
        if self.ctx.messages is not None:
            self.ctx.messages.error("Compose failed", error)

    def _cancelled(self) -> None:
        self.report.setHtml("Cancelled: nothing was written.")
        if self.ctx.messages is not None:
            self.ctx.messages.status("Compose cancelled")

    def _load_result(self) -> None:
        if self.result is not None:
            self.models.load(self.result.path(self.ctx.library.root), source="integrated")
        self.load_btn.setEnabled(False)
