"""POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API;
:mod:`engine.server.apis.messages` maps it). Errors take Anthropic's shape
(:mod:`engine.server.errors`, by path)."""

from __future__ import annotations

from functools import partial

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.runtime import jobs as J
from engine.runtime.generatejob import count_prompt
from engine.server import errors as E
from engine.server.apis import messages as M
from engine.server.schemas import new_id
from engine.server.flow import PING, Flow, answer, job_result
from engine.server.replyblocks import Blocks
from engine.server.ondemand import hold, on_demand
from engine.server.request import json_body
from engine.server.routes.responses import SKIPPED_HEADER


async def _parse(request: Request, body, *, count_only: bool = False) -> M.MessagesRequest:
    """The body as a resolved job, parsed in the thread pool (an image URL's fetch or a
    large image's decoding would hold the event loop)."""
    settings, models = request.app.state.settings, await hold(request, body)
    resolve = request.app.state.engine.resolve
    return await run_in_threadpool(
        lambda: M.parse(
            body, models, resolve, settings.request_defaults, count_only=count_only, media=settings.media_policy
        )
    )


@on_demand
async def create(request: Request):
    body = await json_body(request)
    req = await _parse(request, body)
    headers = {SKIPPED_HEADER: ", ".join(req.skipped_tools)} if req.skipped_tools else {}
    mid = new_id("msg")
    return await answer(
        request,
        req.job,
        stream=req.stream,
        headers=headers,
        result=lambda res: M.message_object(mid, req, res),
        events=lambda flow: _events(flow, req, mid),
    )


async def _events(flow: Flow, req: M.MessagesRequest, mid: str):
    w = M.EventWriter(mid, req)
    blocks = Blocks()
    try:
        yield w.opening()
        async for ev in flow.events():
            if ev is PING:
                yield M.PING
            elif isinstance(ev, J.Tokens):
                for be in blocks.feed(ev):
                    yield w.block(be)
            elif isinstance(ev, J.Failed):
                err = E.from_exception(ev.error)
                yield w.error(E.body_for(E.ANTHROPIC, err)["error"]["type"], err.message)
            elif isinstance(ev, J.Done):
                for be in blocks.finish():
                    yield w.block(be)
                yield w.closing(ev.result)
    finally:
        flow.release()


@on_demand
async def count_tokens(request: Request):
    body = await json_body(request)
    req = await _parse(request, body, count_only=True)
    n = await job_result(
        request, J.Call(partial(count_prompt, req.job), label="count_tokens", access="read"), COUNT_WAIT_S, "Counting"
    )
    return JSONResponse({"input_tokens": n})


#: the longest count_tokens waits behind the engine's other work
COUNT_WAIT_S = 60


routes = [
    Route("/v1/messages", create, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
