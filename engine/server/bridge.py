"""Engine jobs seen from asyncio: submit on the engine's queue, await its events.

The engine thread calls ``on_event``; events cross to the server's event loop with
``call_soon_threadsafe``. Cancelling the stream (a client disconnect) cancels the job;
the engine then leaves its contexts holding exactly the tokens emitted so far.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, JobHandle


class JobStream:
    def __init__(self, engine: Engine, job: Any):
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self.handle: JobHandle = engine.submit(job, on_event=self._on_event)
        self.final: J.Done | J.Failed | None = None

    def _on_event(self, event: Any) -> None:  # engine thread
        self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def next(self) -> Any:
        ev = await self._queue.get()
        if isinstance(ev, (J.Done, J.Failed)):
            self.final = ev
        return ev

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
