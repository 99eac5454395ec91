"""A submitted job's handle: its event stream, its cancel flag and its result.

Made by :meth:`engine.runtime.engine.Engine.submit`; the engine thread emits events into
it, any thread reads them. Thread-safe.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.runtime import jobs as J

log = logging.getLogger(__name__)

EventFn = Callable[[J.Event], None]


class JobHandle:
    """A submitted job. Thread-safe."""

    def __init__(self, job_id: int, job: J.Job, on_event: EventFn | None, observers: list | None = None):
        self.id = job_id
        self.job = job
        self.cancel_event = threading.Event()
        self.done = threading.Event()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._on_event = on_event
        self._observers = observers if observers is not None else []
        self._final: J.Done | J.Failed | None = None
        #: the submitter asked for per-round events (observers always get them)
        self._rounds = getattr(job, "rounds", True)

    def cancel(self) -> None:
        """Ask the job to stop at its next cancellation point. Not an error."""
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def wants_rounds(self) -> bool:
        """Whether a Round event reaches anyone: the submitter asked for them, or an
        observer watches (the emitter makes none otherwise: one per token, plain)."""
        return self._rounds or bool(self._observers)

    def _emit(self, event: J.Event) -> None:
        if isinstance(event, (J.Done, J.Failed)):
            self._final = event
        if isinstance(event, J.Round) and not self._rounds:
            pass
        elif self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("event callback failed")
        else:
            self._events.put(event)
        for observe in tuple(self._observers):  # the engine's list: one may leave meanwhile (unobserve)
            try:
                observe(self, event)
            except Exception:
                log.exception("event observer failed")
        if self._final is event:
            self.done.set()

    def events(self, timeout: float | None = None) -> Iterator[J.Event]:
        """Yield events until the final Done/Failed (inclusive). Only for handles
        submitted without ``on_event``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ev = self._events.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(f"job {self.id} produced no event in time") from None
            yield ev
            if isinstance(ev, (J.Done, J.Failed)):
                return

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job; return its result, or raise its error. A cancelled job
        returns its partial result (``Done.cancelled`` is True)."""
        if self._on_event is None and not self.done.is_set():
            for _ in self.events(timeout):
                pass
        elif not self.done.wait(timeout):
            raise TimeoutError(f"job {self.id} did not finish in time")
        final = self._final
        if isinstance(final, J.Failed):
            raise final.error
        assert final is not None
        return final.result
