"""One generation request's life on the endpoint, whatever API it came in by: admitted
(or a 429), its job submitted, its events awaited while watching for the client to leave
(a disconnect cancels the job), and keep-alives while a long prompt is decoded.

Every API module (chat completions, Responses, Messages, Ollama) opens a :class:`Flow`,
waits for the first event — a token, or an error it can still answer with a proper
status — and then writes the events in its own wire format. A prompt that takes longer
than :data:`FIRST_WAIT_S` to decode is answered at once with a stream that carries
keep-alives (:data:`PING`) until the first token, so clients do not time out on a long
silent prefill (llama-server's ``--sse-ping-interval``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from engine.errors import EngineStoppedError
from engine.runtime import jobs as J
from engine.server import errors as E
from engine.server.bridge import JobStream
from engine.server.ondemand import take

#: how long a streamed request waits for its first token before it answers with a
#: stream that carries keep-alives instead
FIRST_WAIT_S = 2.0
#: a keep-alive every this many seconds while no event comes
PING_INTERVAL_S = 5.0
#: what :meth:`Flow.events` yields when it is time for a keep-alive
PING = object()


class Flow:
    """An admitted request and its job. Create with :meth:`open`; :meth:`release` once."""

    def __init__(self, request: Request, stream: JobStream):
        self.request = request
        self.stream = stream
        self._loop = asyncio.get_running_loop()
        self._watcher = asyncio.ensure_future(_disconnected(request))
        self._watcher.add_done_callback(lambda _: stream.poke())  # a reader waiting sees the client leave
        #: when the reader last got something (an event or a PING), and the timer that wakes
        #: it for the next PING: one timer while events flow, not one per wait
        self._last = self._loop.time()
        self._ping: asyncio.TimerHandle | None = None
        self._held = True
        self._pending: list[Any] = []
        self.left = False  # the client went away
        #: the request's lease on its model (engine.server.ondemand): given back on release
        self.lease = take(request)

    @classmethod
    def open(cls, request: Request, job: J.Generate) -> Flow:
        """Admit the request (429 when the endpoint's queue is full) and submit ``job``."""
        st = request.app.state
        settings = st.settings
        if st.pending >= settings.max_pending:
            raise E.HTTPError(
                429,
                f"Too many requests in flight ({settings.max_pending}); retry shortly.",
                type_="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": str(settings.retry_after_s)},
            )
        st.pending += 1
        try:
            stream = JobStream(st.engine, job)
        except Exception as e:
            st.pending -= 1
            raise E.from_exception(e, settings.retry_after_s) from None
        return cls(request, stream)

    def release(self) -> None:
        """Give the request's place back (and stop watching the client); cancels the job
        if it has not finished (the client went away mid-stream)."""
        if self._held:
            self._held = False
            self.request.app.state.pending -= 1
            self._watcher.cancel()
            if self._ping is not None:
                self._ping.cancel()
                self._ping = None
            if self.stream.final is None:
                self.stream.cancel()
            if self.lease is not None:
                self.lease.release()

    @property
    def retry_after_s(self) -> int:
        return self.request.app.state.settings.retry_after_s

    async def next(self, timeout: float | None = None) -> Any:
        """The next event; :data:`PING` after ``timeout`` seconds without one; None when
        the client went away (the job is then cancelled and drained)."""
        if self._pending:
            return self._pending.pop(0)
        loop = self._loop
        while True:
            if self._watcher.done():
                return await self._left()
            ev = self.stream.poll()  # buffered: no waiting, no task
            if ev is not None:
                self._last = loop.time()
                return ev
            if timeout is not None:
                due = self._last + timeout
                if loop.time() >= due:
                    self._last = loop.time()
                    return PING
                if self._ping is None or self._ping.when() > due:
                    # a timer rings at the earliest deadline asked for; one set earlier just
                    # wakes the reader to find it is not due yet (once per PING_INTERVAL_S at most)
                    if self._ping is not None:
                        self._ping.cancel()
                    self._ping = loop.call_at(due, self._ring)
            # the stream's future alone: the watcher's end and the timer wake it too (poke)
            await self.stream.waiter()

    def _ring(self) -> None:
        self._ping = None
        self.stream.poke()

    async def _left(self) -> None:
        """The client went away: the job is cancelled and drained."""
        self.left = True
        await self.stream.wait_cancelled()
        return None

    async def first(self, timeout: float | None) -> Any:
        """The first token, the end, or :data:`PING` (nothing yet after ``timeout``), or
        None (the client left). A failure before any token raises its HTTP error."""
        while True:
            ev = await self.next(timeout)
            if ev is None or ev is PING:
                return ev
            if isinstance(ev, J.Failed):
                raise E.from_exception(ev.error, self.retry_after_s)
            if isinstance(ev, (J.Tokens, J.Done)):
                self._pending.insert(0, ev)
                return ev

    async def result(self) -> J.GenerateResult | None:
        """Wait for the job's result (None: the client left). A failure raises; so does a
        job that ended without one (dropped by an engine that is stopping)."""
        while True:
            ev = await self.next()
            if ev is None:
                return None
            if isinstance(ev, J.Failed):
                raise E.from_exception(ev.error, self.retry_after_s)
            if isinstance(ev, J.Done):
                if ev.result is None:
                    raise stopped()
                return ev.result

    async def events(self) -> AsyncIterator[Any]:
        """Tokens events, :data:`PING` while none come, then the final Done (with a
        result) or Failed (a job that ended without a result fails as stopped)."""
        while True:
            ev = await self.next(PING_INTERVAL_S)
            if ev is None:
                return
            if isinstance(ev, J.Done) and ev.result is None:
                err = EngineStoppedError(STOPPED)
                ev = J.Failed(err, err.code, STOPPED)
            if ev is PING or isinstance(ev, (J.Tokens, J.Done, J.Failed)):
                yield ev
            if isinstance(ev, (J.Done, J.Failed)):
                return


#: what a request whose job ended without a result (the engine stopping) is told
STOPPED = "The engine stopped before this request ran."


def stopped() -> E.HTTPError:
    return E.from_exception(EngineStoppedError(STOPPED))


async def _disconnected(request: Request) -> None:
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def answer(
    request: Request,
    job: J.Generate,
    *,
    stream: bool,
    events: Callable[[Flow], AsyncIterator[bytes]],
    result: Callable[[J.GenerateResult], dict],
    media_type: str = "text/event-stream",
    headers: dict[str, str] | None = None,
    keep_alive: bool = True,
) -> Response:
    """The response to a generation request, whatever its API: ``events(flow)`` writes a
    stream (it must release the flow when done), ``result(res)`` the whole reply. Waits
    for the first token (or an error, still a proper status) before answering; with
    ``keep_alive`` a stream whose first token is late opens at once instead. 499: the
    client left first."""
    headers = {k: header_value(v) for k, v in (headers or {}).items()}
    flow = Flow.open(request, job)
    streaming = False
    try:
        first = await flow.first(FIRST_WAIT_S if (stream and keep_alive) else None)
        if first is None:
            return Response(status_code=499)
        if stream:
            headers.update({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            response = FlowResponse(flow, events(flow), media_type=media_type, headers=headers)
            streaming = True
            return response
        res = await flow.result()
        if res is None:
            return Response(status_code=499)
        return JSONResponse(result(res), headers=headers)
    finally:
        if not streaming:
            flow.release()


class FlowResponse(StreamingResponse):
    """A stream that gives its request's place back however it ends — finished, the client
    gone, or failed before its first byte (a body generator that never started runs no
    ``finally``)."""

    def __init__(self, flow: Flow, content: AsyncIterator[bytes], **kw: Any):
        super().__init__(content, **kw)
        self.flow = flow

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()
            self.flow.release()


def header_value(value: str, limit: int = 1024) -> str:
    """``value`` safe in an HTTP header: printable ASCII (others escaped), no line breaks,
    at most ``limit`` characters (tool names come from clients)."""
    text = value.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if " " <= c <= "~" else " " for c in text)
    return text[:limit]


async def job_result(request: Request, job: Any, wait_s: float, what: str) -> Any:
    """The result of a short job that is not a generation (a count, embeddings): submitted,
    awaited on a worker thread up to ``wait_s`` seconds (then cancelled: a 503 that says
    ``what`` waited), a 429 when the queue is full, a 503 when the engine stopped first
    (such a job never returns None)."""
    settings = request.app.state.settings
    try:
        handle = request.app.state.engine.submit(job)
    except Exception as e:  # the engine queue is full, or the engine stopping
        raise E.from_exception(e, settings.retry_after_s) from None
    try:
        result = await run_in_threadpool(handle.result, wait_s)
    except TimeoutError:
        handle.cancel()
        raise E.HTTPError(
            503,
            f"{what} waited {wait_s:g} s behind other work; retry shortly.",
            type_="server_error",
            code="busy",
            headers={"Retry-After": str(settings.retry_after_s)},
        ) from None
    if result is None:  # these jobs always return something: dropped by an engine that is stopping
        raise stopped()
    return result
