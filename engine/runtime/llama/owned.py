"""Freeing llama.cpp objects on the thread that uses them.

Wrappers of llama.cpp objects (model, context, batch) are closed deterministically by
their owners. A wrapper that is garbage-collected unclosed must still be freed, but the
collector can run ``__del__`` on any thread — freeing a context there while the engine
thread decodes with it is a use-after-free. So ``__del__`` frees only on the thread that
created the object; anywhere else it queues the free for that thread, which runs
:func:`reap` at safe points (the engine thread between jobs). Contexts and batches are
freed before models, since a context must not outlive its model.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

#: (owner thread id, priority, free function); priority 0 frees before 1
_pending: deque[tuple[int, int, Callable[[], None]]] = deque()
_lock = threading.Lock()


class Owned:
    """Mixin: call :meth:`_own` in ``__init__``; implement ``close()`` (idempotent) and
    :meth:`_closer` (a function freeing the native object, or None when closed)."""

    _free_priority = 0
    _owner: int = 0

    def _own(self) -> None:
        self._owner = threading.get_ident()

    def _closer(self) -> Callable[[], None] | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __del__(self) -> None:
        try:
            if threading.get_ident() == self._owner:
                self.close()
                return
            closer = self._closer()
            if closer is not None:
                with _lock:
                    _pending.append((self._owner, self._free_priority, closer))
        except Exception:  # interpreter shutdown: nothing sensible left to do
            pass


class OwnedPtr(Owned):
    """:class:`Owned` for a wrapper of one native pointer: ``_ptr`` is freed by the
    subclass's ``_free(ptr)``; :attr:`ptr` raises once closed (``_what`` names the object)."""

    _what = "object"
    _ptr = None

    @staticmethod
    def _free(ptr) -> None:
        raise NotImplementedError

    @property
    def ptr(self):
        if self._ptr is None:
            raise RuntimeError(f"{self._what} is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr is not None:
            self._free(self._ptr)
            self._ptr = None

    def _closer(self) -> Callable[[], None] | None:
        ptr, free = self._ptr, self._free
        return None if ptr is None else (lambda: free(ptr))


def reap() -> int:
    """Run the frees queued for this thread; returns how many ran."""
    me = threading.get_ident()
    with _lock:
        mine = sorted((p for p in _pending if p[0] == me), key=lambda p: p[1])
        for p in mine:
            _pending.remove(p)
    for _, _, free in mine:
        try:
            free()
        except Exception:
            log.exception("freeing a llama.cpp object left unclosed")
    return len(mine)


def pending() -> int:
    with _lock:
        return len(_pending)
