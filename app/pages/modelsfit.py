"""The Models page's "will it fit" parts: a badge on each remote file saying how it
would fit this machine at the context setting, and, while the library is empty, the
models recommended for this machine.

Both are judged from the files' headers (ranged requests: nothing is downloaded) by
the engine (:mod:`engine.runtime.load.recommend`) in background tasks; the widgets here
live on the GUI thread and only render the outcomes.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from app.context import AppContext, load_depth
from app.messages import user_text
from app.tasks import Task
from engine.facade import human_size
from engine.facade.hub import FileGroup
from engine.facade.hub import RECOMMENDED
from engine.facade.hub import HubConfig
from engine.facade import limits
from engine.facade.machine import DeviceFree, Fit

#: badge colours by verdict (readable on the white list background)
VERDICT_COLORS = {"gpu": "#1e7d3c", "partial": "#8a5a00", "cpu": "#2b5fb3", "none": "#b3261e"}


def badge_text(fit: Fit | None) -> str:
    """A file's badge: "fits on the GPU, up to context 32768", "does not fit at context
    32768; up to context 8192 fits"…"""
    if fit is None:
        return "no memory estimate: not a model with layers (a projector?)"
    if fit.fits:
        return f"{fit.label()}, up to context {fit.max_ctx}"
    if fit.max_ctx >= limits.MIN_CTX:
        return f"does not fit at context {fit.n_ctx}; up to context {fit.max_ctx} fits"
    return f"does not fit (needs {human_size(fit.estimate.total_bytes)} at context {fit.n_ctx})"


def machine_line(devices: list[DeviceFree]) -> str:
    """What the fit was judged against: "22.6 GB free host memory, CUDA0: 7.8 GB free"."""
    host, gpus = devices[0], devices[1:]
    return ", ".join(
        [f"{human_size(host.free)} free host memory"] + [f"{d.name}: {human_size(d.free)} free" for d in gpus]
    )


class FitBadges(QObject):
    """Fit badges for the file groups of one repo: one background task reads each
    model's headers in turn and hands each outcome to the GUI thread as it is known.
    Heads get none (they are not loaded on their own). A child of the page: outcomes of
    a task for a page that is gone, or for a repo no longer listed, are dropped.

    Signals:
        badge(str, object)   a group's name and its Fit (None: nothing to estimate, a
                             projector) or the error that kept it from being read
    """

    badge = Signal(str, object)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.task: Task | None = None
        self._run = 0  # the current task's number: outcomes of older ones are dropped

    def start(self, cfg: HubConfig, ctx: AppContext, repo: str, revision: str, groups: list[FileGroup]) -> Task:
        from engine.facade.machine import machine_devices
        from engine.facade.machine import remote_fit

        self.cancel()
        self._run += 1
        run, n_ctx, depth = self._run, ctx.settings.n_ctx, load_depth(ctx.settings)
        todo = [g for g in groups if not g.head and not g.projector and g.complete]

        def work(report, cancel):
            devices = machine_devices()
            for g in todo:
                if cancel.is_set():
                    return None
                try:
                    report((run, g.name, remote_fit(cfg, repo, g, revision, n_ctx, devices, depth=depth)))
                except Exception as e:  # shown on that file's badge; the other files still get theirs
                    report((run, g.name, e))
            return None

        self.task = Task(work, name="fit-badges")
        self.task.progress.connect(self._deliver)
        return self.task.start()

    def _deliver(self, item: tuple) -> None:
        run, name, outcome = item
        if run == self._run:
            self.badge.emit(name, outcome)

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None


def show_badge(item: QListWidgetItem, outcome: object) -> None:
    """Put a file's badge under its line in the file list (the line is kept in UserRole+1)."""
    base = item.data(Qt.ItemDataRole.UserRole + 1) or item.text()
    if isinstance(outcome, BaseException):
        item.setText(f"{base}\n      no memory estimate: {user_text(outcome)}")
        item.setToolTip("")
        return
    fit = outcome if isinstance(outcome, Fit) else None
    item.setText(f"{base}\n      {badge_text(fit)}")
    if fit is not None:
        item.setForeground(QColor(VERDICT_COLORS[fit.verdict]))
        item.setToolTip(fit.line())


class RecommendedBox(QWidget):
    """ "Recommended for this machine": the curated MTP repos' best quantization that fits
    (engine.runtime.load.recommend), checked in a cancellable background task. Shown
    while the library is empty. GUI thread.

    Signals:
        openRepo(str, str)   a recommendation was chosen: its repo and file
    """

    openRepo = Signal(str, str)

    def __init__(self, ctx: AppContext, cfg: Callable[[], HubConfig], parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.cfg = cfg
        #: the repos checked (the curated list; tests point it at their own)
        self.repos: tuple[str, ...] = RECOMMENDED
        self.task: Task | None = None
        self.results: list | None = None  # the last check's recommendations, best first
        self._started = False
        self._checking: dict = {}  # the check under way: its repos, context, progress
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        title = QLabel("<b>Recommended for this machine</b>")
        self.status = QLabel("")
        self.status.setObjectName("Hint")
        self.status.setWordWrap(True)
        self.cancel_btn = QPushButton("Cancel")
        self.check_btn = QPushButton("Check again")
        row.addWidget(title, 1)
        row.addWidget(self.cancel_btn)
        row.addWidget(self.check_btn)
        lay.addLayout(row)
        lay.addWidget(self.status)
        self.list = QListWidget()
        lay.addWidget(self.list, 1)
        self.cancel_btn.clicked.connect(self.cancel)
        self.check_btn.clicked.connect(self.start)
        self.list.itemClicked.connect(self._open)
        self.list.itemActivated.connect(self._open)
        self._running(False)

    @property
    def started(self) -> bool:
        """Whether a check was ever started (a cancelled one too: it is not retried
        unasked)."""
        return self._started

    def _running(self, on: bool) -> None:
        self.cancel_btn.setVisible(on)
        self.check_btn.setVisible(not on)

    def start(self) -> Task | None:
        """Check the recommended repos against this machine at the context setting (a
        check under way is left to finish)."""
        from engine.facade.machine import machine_devices
        from engine.facade.machine import recommend

        if self.task is not None:
            return self.task
        self._started = True
        cfg = self.cfg()
        if cfg.offline:
            self.status.setText("Offline mode: recommendations need Hugging Face.")
            return None
        repos, n_ctx, depth = tuple(self.repos), self.ctx.settings.n_ctx, load_depth(self.ctx.settings)
        self._checking = {"repos": repos, "n_ctx": n_ctx, "done": [], "errors": []}

        def work(report, cancel):
            devices = machine_devices()
            recs = recommend(
                cfg,
                devices,
                n_ctx=n_ctx,
                repos=repos,
                depth=depth,
                cancel=cancel,
                report=lambda repo, outcome: report((repo, outcome)),
            )
            return devices, recs

        self.list.clear()
        self.results = None
        self.status.setText(f"reading the headers of {len(repos)} repositories; nothing is downloaded…")
        task = self.task = Task(work, name="recommend")
        # bound methods of this widget: nothing arrives here once it is gone
        task.progress.connect(self._on_progress)
        task.succeeded.connect(self._on_result)
        task.failed.connect(self._on_failed)
        task.cancelled.connect(self._on_cancelled)
        task.done.connect(self._on_done)
        self._running(True)
        return task.start()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def _on_progress(self, item: tuple) -> None:
        c = self._checking
        c["done"].append(item[0])
        if isinstance(item[1], BaseException):
            c["errors"].append(item[1])
        self.status.setText(
            f"reading the headers of {len(c['repos'])} repositories ({len(c['done'])} done); nothing is downloaded…"
        )

    def _on_failed(self, error: BaseException) -> None:
        self.status.setText(f"Recommendations failed: {user_text(error)}")

    def _on_cancelled(self) -> None:
        self.status.setText("Cancelled.")

    def _on_done(self) -> None:
        self.task = None
        self._running(False)

    def _on_result(self, result: tuple) -> None:
        devices, recs = result
        n_ctx, n_repos, errors = self._checking["n_ctx"], len(self._checking["repos"]), self._checking["errors"]
        self.results = recs
        for r in recs:
            item = QListWidgetItem(f"{r.repo_id}\n      {r.line()}")
            item.setData(Qt.ItemDataRole.UserRole, (r.repo_id, r.group.name))
            item.setForeground(QColor(VERDICT_COLORS[r.fit.verdict]))
            item.setToolTip(f"{r.group.name}: {r.fit.line()}")
            self.list.addItem(item)
        on = machine_line(devices)
        checked = n_repos - len(errors)
        if not checked:  # nothing was read: no verdict on what fits
            self.status.setText(
                f"Could not check the {n_repos} recommended models: {user_text(errors[0]).rstrip('.')}. "
                "Check the connection to Hugging Face and press Check again."
            )
            return
        text = f"{len(recs)} of {n_repos} fit at context {n_ctx} with MTP ({on}); pick one to see its files."
        if not recs:
            text = f"None of the {checked} recommended models checked fits at context {n_ctx} ({on})."
        if errors:
            text += f" {len(errors)} could not be checked: {user_text(errors[0])}"
        self.status.setText(text)

    def _open(self, item: QListWidgetItem) -> None:
        data = item.data(Qt.ItemDataRole.UserRole)
        if data:
            self.openRepo.emit(*data)
