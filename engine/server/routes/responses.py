"""POST /v1/responses, GET and DELETE /v1/responses/{id} (OpenAI's Responses API;
:mod:`engine.server.apis.responses` maps it).

Stored responses (``store``, the default) are kept in memory, a bounded number, newest
last, so ``previous_response_id`` continues a conversation without the client re-sending
it; the prompt cache makes the continuation cheap (the stored conversation renders to the
same prefix the live context or a snapshot holds).
"""

from __future__ import annotations

from collections import OrderedDict

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.runtime import jobs as J
from engine.server import errors as E
from engine.server.apis import responses as R
from engine.server.apis import responses_out as RO
from engine.server.schemas import new_id
from engine.server.flow import PING, Flow, answer
from engine.server.replyblocks import Blocks
from engine.server.ondemand import hold, on_demand
from engine.server.request import json_body

#: stored responses kept at most (the oldest goes first)
STORE_SIZE = 256
SKIPPED_HEADER = "x-mtp-studio-skipped-tools"


class ResponseStore:
    """Stored responses by id: the response object and the conversation it ended (event
    loop thread only)."""

    def __init__(self, size: int = STORE_SIZE):
        self.size = size
        self._items: OrderedDict[str, tuple[dict, list[dict]]] = OrderedDict()

    def put(self, obj: dict, history: list[dict]) -> None:
        self._items[obj["id"]] = (obj, history)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(self, rid: str) -> tuple[dict, list[dict]]:
        if rid not in self._items:
            raise E.HTTPError(
                404,
                f"No stored response with id '{rid}' (responses are kept in memory, the last "
                f"{self.size}, and only with store: true).",
                code="response_not_found",
            )
        return self._items[rid]

    def delete(self, rid: str) -> None:
        self.get(rid)
        del self._items[rid]


def _store(request: Request) -> ResponseStore:
    st = request.app.state
    if not hasattr(st, "responses"):
        st.responses = ResponseStore()
    return st.responses


@on_demand
async def create(request: Request):
    body = await json_body(request)
    engine, store = request.app.state.engine, _store(request)
    previous = None
    if isinstance(body, dict) and isinstance(body.get("previous_response_id"), str):
        obj, history = store.get(body["previous_response_id"])
        previous = history
    settings, models = request.app.state.settings, await hold(request, body)
    # in the thread pool: an image URL's fetch or a large image's decoding would hold the event loop
    req = await run_in_threadpool(
        R.parse, body, models, engine.resolve, settings.request_defaults, previous, settings.media_policy
    )
    headers = {SKIPPED_HEADER: ", ".join(req.skipped_tools)} if req.skipped_tools else {}
    rid, created = new_id("resp"), RO.now()

    def whole(res: J.GenerateResult) -> dict:
        status, incomplete = RO.status_of(res)
        obj = RO.response_object(rid, created, req, status, RO.output_of(res), res, incomplete)
        if req.store:
            store.put(obj, req.history + RO.history_of(obj["output"]))
        return obj

    return await answer(
        request,
        req.job,
        stream=req.stream,
        headers=headers,
        result=whole,
        events=lambda flow: _events(flow, req, rid, created, store),
    )


async def _events(flow: Flow, req: R.ResponsesRequest, rid: str, created: int, store: ResponseStore):
    w = RO.EventWriter(rid, created, req)
    blocks = Blocks()
    try:
        for chunk in w.opening():
            yield chunk
        async for ev in flow.events():
            if ev is PING:
                yield b": ping\n\n"
            elif isinstance(ev, J.Tokens):
                for be in blocks.feed(ev):
                    for chunk in w.block(be):
                        yield chunk
            elif isinstance(ev, J.Failed):
                err = E.from_exception(ev.error)
                yield w.failed(err.code, err.message)
            elif isinstance(ev, J.Done):
                for be in blocks.finish():
                    for chunk in w.block(be):
                        yield chunk
                chunk, obj = w.closing(ev.result)
                if req.store:
                    store.put(obj, req.history + RO.history_of(obj["output"]))
                yield chunk
    finally:
        flow.release()


async def retrieve(request: Request):
    obj, _ = _store(request).get(request.path_params["rid"])
    return JSONResponse(obj)


async def delete(request: Request):
    rid = request.path_params["rid"]
    _store(request).delete(rid)
    return JSONResponse({"id": rid, "object": "response", "deleted": True})


routes = [
    Route("/v1/responses", create, methods=["POST"]),
    Route("/v1/responses/{rid}", retrieve, methods=["GET"]),
    Route("/v1/responses/{rid}", delete, methods=["DELETE"]),
]
