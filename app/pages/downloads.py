"""The Models page's downloads: a row per pull from Hugging Face, with its progress
(bytes, rate, ETA), Pause (the partial file is kept), Resume (continues where it
stopped) and Cancel (the partial is removed).

Each pull runs as a task (:mod:`app.tasks`) on a worker thread, the engine's
:func:`engine.hub.pull.pull`; the widgets live on the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.context import AppContext
from app.tasks import Task
from engine.facade import human_size
from engine.facade.hub import discard_partial
from engine.facade.hub import FileGroup
from engine.facade.hub import HubConfig


def hub_config(ctx: AppContext) -> HubConfig:
    return HubConfig.from_env(token=ctx.settings.hub_token or None)


@dataclass
class PullRequest:
    repo: str
    group: FileGroup
    head: FileGroup | None
    revision: str
    #: the repo's projector to download with the model (it then reads images)
    projector: FileGroup | None = None


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
        extra = "".join(f" + {g.name}" for g in (req.head, req.projector) if g is not None)
        self.title = QLabel(f"{req.repo}: {req.group.name}{extra}")
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
        from engine.facade.hub import pull

        req, cfg, lib = self.req, hub_config(self.ctx), self.ctx.library
        head = f"{req.repo}:{req.head.name}" if req.head else None

        def work(report, cancel):
            return pull(
                cfg,
                lib,
                req.repo,
                file=req.group.name,
                revision=req.revision,
                head=head,
                mmproj=req.projector.name if req.projector is not None else False,
                progress=report,
                cancel=cancel,
            )

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
        with_ = [w for w, e in (("its head", result.head), ("its projector: it reads images", result.projector)) if e]
        self.info.setText("done: in the library" + (f" (paired with {' and '.join(with_)})" if with_ else ""))
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
            from engine.facade.hub import Target

            for g in (self.req.group, self.req.head, self.req.projector):
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


class Downloads(QWidget):
    """The download rows, newest last (shown once there is one).

    Signals:
        finished(object)   a pull completed: its PullResult (the library has new entries)
    """

    finished = Signal(object)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.rows: list[DownloadRow] = []
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self.setVisible(False)

    def add(self, req: PullRequest) -> DownloadRow:
        """Start pulling ``req`` in a new row."""
        row = DownloadRow(self.ctx, req, self)
        row.finished.connect(self.finished)
        self._lay.addWidget(row)
        self.rows.append(row)
        self.setVisible(True)
        row.start()
        return row
