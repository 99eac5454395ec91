"""The one adapter between the engine thread and the GUI.

Widgets never touch engine objects: they call :meth:`EngineBridge.submit` and listen to
the bridge's signals, which are always emitted on the GUI thread. The bridge observes
every engine job — the GUI's own and the endpoint's — and its events are appended to a
buffer from the engine thread; one queued wake-up drains it at most every ``FLUSH_MS``
milliseconds, merging each job's token events into one text delta and its round
statistics into one list, so the event loop stays responsive however fast the model
generates.

Signals (GUI thread):
    started(job_id, job)                 job: the submitted job object
    tokens(job_id, text, n_tokens)       text since the last flush
    rounds(job_id, list[RoundStats])
    progress(job_id, fraction, message)
    failed(job_id, error)                an exception; cancellation is not a failure
    finished(job_id, result, cancelled)
    modelsChanged(dict)                  loaded models: name -> info
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, JobHandle

FLUSH_MS = 16


def _ignore(_event: J.Event) -> None:
    pass


class EngineBridge(QObject):
    started = Signal(int, object)
    tokens = Signal(int, str, int)
    rounds = Signal(int, list)
    progress = Signal(int, float, str)
    failed = Signal(int, object)
    finished = Signal(int, object, bool)
    modelsChanged = Signal(dict)
    _wake = Signal()

    def __init__(self, engine: Engine, parent: QObject | None = None):
        super().__init__(parent)
        self.engine = engine
        self._lock = threading.Lock()
        self._pending: list[tuple[JobHandle, J.Event]] = []
        self._scheduled = False
        self._last_flush = 0.0
        self._handles: dict[int, JobHandle] = {}
        self._wake.connect(self._flush_soon, Qt.ConnectionType.QueuedConnection)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._drain)
        engine.observe(self._observe)

    def _observe(self, handle: JobHandle, event: J.Event) -> None:  # engine thread
        with self._lock:
            self._pending.append((handle, event))
            wake = not self._scheduled
            self._scheduled = True
        if wake:
            self._wake.emit()

    # ------------------------------------------------------------------ submit
    def submit(self, job: J.Job) -> JobHandle:
        """Queue ``job`` on the engine; its events arrive as this bridge's signals."""
        handle = self.engine.submit(job, on_event=_ignore)
        self._handles[handle.id] = handle
        return handle

    def cancel(self, job_id: int) -> None:
        h = self._handles.get(job_id)
        if h is not None:
            h.cancel()

    def models(self) -> dict[str, dict]:
        return self.engine.models()

    # ------------------------------------------------------------------- drain
    def _flush_soon(self) -> None:
        wait = FLUSH_MS - (time.monotonic() - self._last_flush) * 1000
        if wait <= 0:
            self._drain()
        elif not self._timer.isActive():
            self._timer.start(int(wait) + 1)

    def _drain(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
        self._last_flush = time.monotonic()
        text: dict[int, list[str]] = {}
        counts: dict[int, int] = {}
        rounds: dict[int, list] = {}

        def flush_job(jid: int) -> None:
            if jid in text:
                self.tokens.emit(jid, "".join(text.pop(jid)), counts.pop(jid, 0))
            if jid in rounds:
                self.rounds.emit(jid, rounds.pop(jid))

        for handle, ev in batch:
            jid = handle.id
            if isinstance(ev, J.Tokens):
                text.setdefault(jid, []).append(ev.text)
                counts[jid] = counts.get(jid, 0) + len(ev.tokens)
            elif isinstance(ev, J.Round):
                rounds.setdefault(jid, []).append(ev.stats)
            elif isinstance(ev, J.Started):
                self.started.emit(jid, handle.job)
            elif isinstance(ev, J.Progress):
                self.progress.emit(jid, ev.fraction, ev.message)
            elif isinstance(ev, (J.Failed, J.Done)):
                flush_job(jid)
                self._handles.pop(jid, None)
                if isinstance(ev, J.Failed):
                    self.failed.emit(jid, ev.error)
                else:
                    self.finished.emit(jid, ev.result, ev.cancelled)
                if isinstance(handle.job, (J.LoadModel, J.UnloadModel)):
                    self.modelsChanged.emit(self.engine.models())
        for jid in list(text) + list(rounds):
            flush_job(jid)
