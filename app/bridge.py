"""The one adapter between the engine thread and the GUI.

Widgets never touch engine objects: they call :meth:`EngineBridge.run` and listen to
the returned :class:`JobSignals`, which carry that job's events and nothing else, always
on the GUI thread. The bridge observes every engine job — the GUI's own and the
endpoint's — and its events are appended to a buffer from the engine thread; one queued
wake-up drains it at most every ``FLUSH_MS`` milliseconds, merging each job's token
events into one text delta and its round statistics into one list, so the event loop
stays responsive however fast the model generates.

Bridge signals (GUI thread), for observers of every job:
    started(job_id, job)                 job: the submitted job object; a handler may
                                         call ``bridge.follow(job_id)`` to follow it
    modelsChanged(dict)                  loaded models (name -> ModelInfo), after a load/unload

JobSignals (one job's, GUI thread):
    parts(list[Part])                    the same text split into thinking, content and
                                         tool calls (prompt.reply), emitted just before
                                         tokens, only when the reply is split
    tokens(text, n_tokens)               text since the last flush
    rounds(list[RoundStats])
    progress(fraction, message)
    failed(error)                        an exception; cancellation is not a failure
    finished(result, cancelled)
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from engine.facade import J
from engine.facade import CacheFigures, Engine, JobHandle, ModelInfo, SlotInfo

FLUSH_MS = 16


def _ignore(_event: J.Event) -> None:
    pass


class JobSignals(QObject):
    """One job's events. ``id`` is the engine's job id; :meth:`cancel` cancels it."""

    tokens = Signal(str, int)
    parts = Signal(list)
    rounds = Signal(list)
    progress = Signal(float, str)
    failed = Signal(object)
    finished = Signal(object, bool)

    def __init__(self, handle: JobHandle, parent: QObject | None = None):
        super().__init__(parent)
        self.handle = handle
        self.id = handle.id
        self.job = handle.job

    def cancel(self) -> None:
        self.handle.cancel()


class EngineBridge(QObject):
    started = Signal(int, object)
    modelsChanged = Signal(dict)
    _wake = Signal()

    def __init__(self, engine: Engine, parent: QObject | None = None):
        super().__init__(parent)
        self.engine = engine
        self._lock = threading.Lock()
        self._pending: list[tuple[JobHandle, J.Event]] = []
        self._scheduled = False
        self._last_flush = 0.0
        self._jobs: dict[int, JobSignals] = {}  # submitted or started, not ended
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
    def run(self, job: J.Job) -> JobSignals:
        """Queue ``job`` on the engine; connect to the returned object for its events
        (they are delivered from the next event-loop turn on, so connecting right after
        this call misses nothing)."""
        handle = self.engine.submit(job, on_event=_ignore)
        signals = JobSignals(handle, self)
        self._jobs[handle.id] = signals
        return signals

    def follow(self, job_id: int) -> JobSignals | None:
        """A started job's signals, whoever submitted it (the endpoint too); None once it
        has ended."""
        return self._jobs.get(job_id)

    # ------------------------------------------------------------ figures
    # What the pages show of the engine, read from any thread without waiting on it.
    def models(self) -> dict[str, ModelInfo]:
        """The loaded models by name."""
        return self.engine.models()

    def slots(self) -> dict[str, list[SlotInfo]]:
        """Each loaded model's slots now."""
        return self.engine.slots()

    def step_depths(self) -> dict[str, dict[int, int]]:
        """Each loaded model's MTP auto depth by the number of sequences in a step."""
        return self.engine.step_depths()

    def prompt_cache_info(self) -> CacheFigures:
        """The prompt caches' figures, summed over the loaded models."""
        return self.engine.prompt_cache_info()

    def set_prompt_cache_mb(self, mb: int) -> None:
        """A new prompt-cache budget for every loaded model (and later loads)."""
        self.engine.set_prompt_cache_mb(mb)

    def request_defaults(self) -> J.Defaults:
        """What a reply gets for a value nobody set (the engine's layer over the built-in
        one): what the chat controls show for a preference left unset."""
        return self.engine.request_defaults()

    def stop(self) -> None:
        """Stop the engine (at the app's end): running jobs are cancelled."""
        self.engine.stop()

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
        parts: dict[int, list] = {}
        rounds: dict[int, list] = {}

        def flush_job(jid: int) -> None:
            js = self._jobs.get(jid)
            if jid in text:
                chunk, n = "".join(text.pop(jid)), counts.pop(jid, 0)
                split = parts.pop(jid, None)
                if js is not None and split is not None:
                    js.parts.emit(split)
                if js is not None:
                    js.tokens.emit(chunk, n)
            if jid in rounds:
                got = rounds.pop(jid)
                if js is not None:
                    js.rounds.emit(got)

        for handle, ev in batch:
            jid = handle.id
            if isinstance(ev, J.Tokens):
                text.setdefault(jid, []).append(ev.text)
                counts[jid] = counts.get(jid, 0) + len(ev.tokens)
                if ev.parts is not None:
                    parts.setdefault(jid, []).extend(ev.parts)
            elif isinstance(ev, J.Round):
                rounds.setdefault(jid, []).append(ev.stats)
            elif isinstance(ev, J.Started):
                if jid not in self._jobs:  # submitted elsewhere: signals for observers
                    self._jobs[jid] = JobSignals(handle, self)
                self.started.emit(jid, handle.job)
            elif isinstance(ev, J.Progress):
                js = self._jobs.get(jid)
                if js is not None:
                    js.progress.emit(ev.fraction, ev.message)
            elif isinstance(ev, (J.Failed, J.Done)):
                flush_job(jid)
                js = self._jobs.pop(jid, None)
                if js is not None:
                    if isinstance(ev, J.Failed):
                        js.failed.emit(ev.error)
                    else:
                        js.finished.emit(ev.result, ev.cancelled)
                    js.deleteLater()
                if isinstance(handle.job, (J.LoadModel, J.UnloadModel)):
                    self.modelsChanged.emit(self.engine.models())
        for jid in list(text) + list(rounds):
            flush_job(jid)
