"""Long work outside the engine (downloads, compose, imports, backend builds) run on a
worker thread, reported on the GUI thread.

The work is a plain function ``fn(report, cancel)`` that knows nothing about Qt (it
must never touch a widget); ``report(value)`` sends progress, ``cancel`` is a
``threading.Event``. Outcome signals arrive on the GUI thread. Cancelling is not an
error: it ends with ``cancelled``, not ``failed``.

Signals (GUI thread):
    progress(object)    whatever the work reports
    succeeded(object)   its return value
    failed(object)      the exception
    cancelled()
    done()              after any of the three above
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.facade import Cancelled

log = logging.getLogger(__name__)

Work = Callable[[Callable[[Any], None], threading.Event], Any]


class Task(QObject):
    """Has no Qt parent on purpose: a page closing while its task runs must not delete
    the object the worker thread still emits from. Running tasks are kept alive here."""

    _running: set[Task] = set()
    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(object)
    cancelled = Signal()
    done = Signal()

    def __init__(self, work: Work, *, name: str = "task"):
        super().__init__()
        self.work = work
        self.name = name
        self.cancel_event = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Task:
        Task._running.add(self)
        self._thread = threading.Thread(target=self._run, name=f"task-{self.name}", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def cancel(self) -> None:
        self.cancel_event.set()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        try:
            result = self.work(self.progress.emit, self.cancel_event)
        except Cancelled:
            self.cancelled.emit()
        except Exception as e:  # reported to the user by whoever listens to `failed`
            if not isinstance(e, (OSError, ValueError)) and not hasattr(e, "code"):
                log.exception("task %s failed", self.name)
            self.failed.emit(e)
        else:
            if self.cancel_event.is_set():
                self.cancelled.emit()
            else:
                self.succeeded.emit(result)
        self.done.emit()
        Task._running.discard(self)
