"""Ollama's API: GET /api/version, /api/tags, /api/ps; POST /api/show, /api/chat,
/api/generate (:mod:`engine.server.apis.ollama` maps it). Errors take Ollama's shape
(``{"error": "..."}``, by path)."""

from __future__ import annotations

import json

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.errors import NoModelLoadedError
from engine.runtime import jobs as J
from engine.server import errors as E
from engine.server.apis import ollama as O
from engine.server.flow import Flow, answer
from engine.server.ondemand.listing import listing
from engine.runtime.ondemand.residency import parse_keep_alive
from engine.server.ondemand import hold, on_demand, take
from engine.server.request import json_body


async def version(request: Request):
    return JSONResponse({"version": O.VERSION})


async def tags(request: Request):
    return JSONResponse({"models": [O.tag(m) for m in listing(request.app.state)]})


async def ps(request: Request):
    """The loaded models, each with when it unloads (Ollama's far future: never)."""
    out = []
    for m in listing(request.app.state):
        if not m.loaded:
            continue
        left = m.residency.expires_in_s if m.residency is not None else None
        expires = O.iso_in(left) if left is not None else NEVER
        out.append(
            {
                **O.tag(m),
                "expires_at": expires,
                "size_vram": m.info.offloaded_bytes if m.info is not None else 0,
                "context_length": m.context_length,
            }
        )
    return JSONResponse({"models": out})


#: what ``/api/ps`` says of a model kept loaded (Ollama writes the same far future)
NEVER = "2318-08-31T00:00:00Z"


@on_demand
async def show(request: Request):
    body = await json_body(request)
    st = request.app.state
    listed = {m.name: m for m in listing(st)}
    name = body.get("model") or body.get("name") if isinstance(body, dict) else None
    if (
        isinstance(name, str)
        and getattr(st, "residency", None) is not None
        and name.removesuffix(":latest") not in listed
    ):
        try:
            name, _ = st.residency.resolve(name)  # another name of a model: answered without loading it
        except NoModelLoadedError:
            pass
    key = O.model_name(dict(body, model=name) if isinstance(body, dict) and name else body, listed)
    return JSONResponse(O.show(listed[key]))


async def chat(request: Request):
    return await _generate(request, chat=True)


async def generate(request: Request):
    return await _generate(request, chat=False)


@on_demand
async def _generate(request: Request, *, chat: bool):
    body = await json_body(request)
    engine = request.app.state.engine
    residency = getattr(request.app.state, "residency", None)
    named = isinstance(body, dict) and isinstance(body.get("model") or body.get("name"), str)
    if named and residency is not None and not body.get("messages" if chat else "prompt"):
        if parse_keep_alive(body.get("keep_alive")) == 0:  # unload, without loading it first
            return await _unload_only(
                request, body["model"] if isinstance(body.get("model"), str) else body["name"], chat=chat
            )
        await hold(request, body, keys=("model", "name"))
        return _load_only(request, chat=chat)
    models = await hold(request, body, keys=("model", "name"))
    settings = request.app.state.settings
    # in the thread pool: a large image's decoding would hold the event loop
    req = await run_in_threadpool(
        lambda: O.parse(body, models, engine.resolve, settings.request_defaults, chat=chat, media=settings.media_policy)
    )
    # NDJSON has no keep-alive: a stream waits for its first token
    return await answer(
        request,
        req.job,
        stream=req.stream,
        media_type="application/x-ndjson",
        keep_alive=False,
        result=lambda res: O.final(req, res, whole=True),
        events=lambda flow: _lines(flow, req),
    )


def _load_only(request: Request, *, chat: bool) -> JSONResponse:
    """A body with a model and no prompt loads it (held by the caller): Ollama's preload."""
    lease = take(request)
    assert lease is not None  # the caller held the model the body names
    lease.release()
    return _done(lease.name, "load", chat)


async def _unload_only(request: Request, name: str, *, chat: bool) -> JSONResponse:
    """A body with a model, no prompt and ``keep_alive: 0`` unloads it (after its running
    requests end), or answers at once when it is not loaded: Ollama's way to free memory."""
    residency = request.app.state.residency
    loaded, _ = residency.resolve(name)  # a name nothing answers to: the 404 that lists the models
    if loaded in request.app.state.engine.models():
        await run_in_threadpool(_unload_quietly, residency, loaded)
    return _done(loaded, "unload", chat)


def _done(name: str, reason: str, chat: bool) -> JSONResponse:
    out = {"model": name, "created_at": O.now_iso(), "done": True, "done_reason": reason}
    out.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
    return JSONResponse(out)


def _unload_quietly(residency, name: str) -> None:
    try:
        residency.unload(name)
    except NoModelLoadedError:
        pass  # already gone (its expiry came first)


def _line(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


async def _lines(flow: Flow, req: O.OllamaRequest):
    try:
        async for ev in flow.events():
            if isinstance(ev, J.Tokens):
                obj = O.chunk(req, ev)
                if obj is not None:
                    yield _line(obj)
            elif isinstance(ev, J.Failed):
                yield _line({"error": E.from_exception(ev.error).message})
            elif isinstance(ev, J.Done):
                yield _line(O.final(req, ev.result, whole=False))
    finally:
        flow.release()


routes = [
    Route("/api/version", version, methods=["GET"]),
    Route("/api/tags", tags, methods=["GET"]),
    Route("/api/ps", ps, methods=["GET"]),
    Route("/api/show", show, methods=["POST"]),
    Route("/api/chat", chat, methods=["POST"]),
    Route("/api/generate", generate, methods=["POST"]),
]
