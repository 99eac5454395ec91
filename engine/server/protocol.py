"""uvicorn's HTTP/1.1 protocol with a deadline for the request head.

uvicorn closes idle kept-alive connections, but a client that opens a connection and
sends its request line and headers a byte at a time (or never) holds it open
indefinitely. Here a connection that has not completed a request head within the
deadline is closed; the deadline restarts for each request on a kept-alive connection.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def protocol_with_head_deadline(seconds: float) -> type[H11Protocol]:
    class HeadDeadlineH11(H11Protocol):
        head_timeout = seconds

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._head_timer: asyncio.TimerHandle | None = None
            self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm_head_timer()  # a whole request head arrived

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._arm_head_timer()  # the next request on this connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadlineH11
