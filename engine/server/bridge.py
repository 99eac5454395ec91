"""Engine jobs seen from asyncio: submit on the engine's queue, await its events.

The engine thread calls ``on_event``: the event is appended to the stream's buffer, and the
server's event loop is woken (``call_soon_threadsafe``) only when no wake-up is pending, so a
burst of events costs one. While tokens stream faster than :data:`PACE_S` apart, a wake-up is
followed by a pause of :data:`PACE_S` in which the events only gather (a timer of the loop's
ends it, with no wake-up from the engine thread): one wake-up per few tokens instead of one per
token. Every wake-up is a switch of the loop's thread onto a core llama.cpp's threads are
decoding on; on the demo, one stream over HTTP went from ~2,510 to ~3,040 chunks/s with the
pause (2 cores). A stream slower than that (a big model's, a token every 10 ms) gathers nothing
in a pause: it has none, so each of its tokens costs the loop one wake-up, not two (the event's
and the empty pause's end). A job's first tokens and its final event are never held back. The
loop takes buffered events without waiting (:meth:`JobStream.poll`), and waits on a plain future
(:meth:`JobStream.waiter`) only when the buffer is empty: no task per event, and Tokens events
that gathered come out as one (one chunk). Cancelling the stream (a client disconnect) cancels the job; the engine then
leaves its contexts holding exactly the tokens emitted so far.

Ownership: the buffer is appended to by the engine thread and read by the loop (a deque's
append and popleft are atomic); ``_scheduled`` is shared under ``_lock`` (set: a wake-up or the
pause is pending, and an event needs none); ``_tokens_seen`` is written by the engine thread and
read by the loop (a bool: at worst one wake-up paused or not); the waiter is the loop's alone.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, JobHandle

#: while a stream's tokens flow, the loop is woken for them at most once per this many seconds
#: (a human reads nothing in 4 ms; an agent waits for the whole reply)
PACE_S = 0.004
#: the most Tokens events joined into one (:meth:`JobStream.poll`)
JOIN_MAX = 256


class JobStream:
    def __init__(self, engine: Engine, job: Any):
        self._loop = asyncio.get_running_loop()
        self._events: deque[Any] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._tokens_seen = False
        self._pause: asyncio.TimerHandle | None = None  # the pause under way (the loop's)
        self._woke_at = float("-inf")  # when the loop last looked at the buffer (the loop's)
        self._waiter: asyncio.Future | None = None
        self.final: J.Done | J.Failed | None = None
        self.handle: JobHandle = engine.submit(job, on_event=self._on_event)

    def _on_event(self, event: Any) -> None:  # engine thread
        self._events.append(event)
        # the first tokens (time to first token) and the end go out at once, pause or not;
        # tokens a client sees nothing of (a special token's empty text, the first bytes of
        # a character) do not start the pauses: the first text would wait for one
        urgent = isinstance(event, (J.Done, J.Failed)) or (isinstance(event, J.Tokens) and not self._tokens_seen)
        if isinstance(event, J.Tokens) and (event.text or event.parts or event.logprobs):
            self._tokens_seen = True
        with self._lock:
            if self._scheduled and not urgent:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:  # the loop, woken by the engine thread
        # a pause gathers only what comes less than PACE_S after the loop last looked
        self._deliver(pause=self._loop.time() - self._woke_at < PACE_S)

    def _deliver(self, *, pause: bool) -> None:  # the loop
        self._woke_at = self._loop.time()
        self.poke()
        if not (pause and self._tokens_seen):
            with self._lock:
                self._scheduled = False
        elif self._pause is None:  # tokens flow: what comes next gathers for a while
            self._pause = self._loop.call_later(PACE_S, self._paused)

    def poke(self) -> None:
        """Wake the reader waiting on :meth:`waiter`, if one is (the loop): an event may be
        buffered, or something else it waits for has happened."""
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)

    def _paused(self) -> None:  # the loop, PACE_S after a wake-up while tokens flow
        self._pause = None
        self._woke_at = self._loop.time()  # a reader busy now takes what gathered itself
        waiting = self._waiter is not None and not self._waiter.done()
        with self._lock:
            # what gathered goes to a reader waiting for it, and the next pause begins; a
            # reader that is not waiting takes the buffer itself before it waits again (and
            # a stream nobody reads any more is left alone)
            again = self._scheduled = bool(self._events) and waiting
        if again:
            self._deliver(pause=True)

    def poll(self) -> Any | None:
        """The next buffered event, or None when there is none yet (the loop; never waits).
        Tokens events buffered one after another come as one (:meth:`J.Tokens.then`): one
        chunk for what gathered during a pause, not one per round, so the loop writes and
        the client parses a chunk per few tokens."""
        events = self._events
        if not events:
            return None
        ev = events.popleft()
        if isinstance(ev, J.Tokens):
            n = 1  # at most JOIN_MAX in one (each join copies what came before: a long backlog
            # of a reader that was away comes in several chunks, not in quadratic time)
            while n < JOIN_MAX and events and isinstance(events[0], J.Tokens):  # only the loop takes from the left
                joined = ev.then(events[0])
                if joined is None:
                    break
                ev = joined
                events.popleft()
                n += 1
        elif isinstance(ev, (J.Done, J.Failed)):
            self.final = ev
        return ev

    def waiter(self) -> asyncio.Future:
        """A future resolved once an event may be buffered (the loop)."""
        if self._waiter is None or self._waiter.done():
            self._waiter = self._loop.create_future()
            if self._events:
                self._waiter.set_result(None)
        return self._waiter

    async def next(self) -> Any:
        while True:
            ev = self.poll()
            if ev is not None:
                return ev
            await self.waiter()

    async def __aiter__(self) -> AsyncIterator[Any]:
        while self.final is None:
            yield await self.next()

    def cancel(self) -> None:
        self.handle.cancel()

    async def wait_cancelled(self) -> None:
        """Cancel and drain to the final event (the engine is consistent after it)."""
        self.cancel()
        while self.final is None:
            await self.next()
