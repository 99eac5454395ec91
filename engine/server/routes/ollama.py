"""Ollama's API: GET /api/version, /api/tags, /api/ps; POST /api/show, /api/chat,
/api/generate (:mod:`engine.server.ollama_api` maps it). Errors take Ollama's shape
(``{"error": "..."}``, by path)."""

from __future__ import annotations

import json
import os

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.runtime import jobs as J
from engine.server import errors as E
from engine.server import ollama_api as O
from engine.server.flow import Flow, answer
from engine.server.request import json_body


def _size(info: dict) -> int:
    try:
        return os.path.getsize(info.get("path") or "")
    except OSError:
        return 0


async def version(request: Request):
    return JSONResponse({"version": O.VERSION})


async def tags(request: Request):
    models = request.app.state.engine.models()
    return JSONResponse({"models": [O.tag(n, i, _size(i)) for n, i in models.items()]})


async def ps(request: Request):
    models = request.app.state.engine.models()
    out = [{**O.tag(n, i, _size(i)), "expires_at": "9999-12-31T23:59:59Z", "size_vram": 0,
            "context_length": i.get("n_ctx")} for n, i in models.items()]  # fmt: skip
    return JSONResponse({"models": out})


async def show(request: Request):
    body = await json_body(request)
    models = request.app.state.engine.models()
    name = O.model_name(body, models)
    info = models[name]
    return JSONResponse(O.show(name, info, info.get("chat_template") or ""))


async def chat(request: Request):
    return await _generate(request, chat=True)


async def generate(request: Request):
    return await _generate(request, chat=False)


async def _generate(request: Request, *, chat: bool):
    body = await json_body(request)
    engine = request.app.state.engine
    req = O.parse(body, engine.models(), engine.resolve, request.app.state.settings.request_defaults, chat=chat)
    # NDJSON has no keep-alive: a stream waits for its first token
    return await answer(request, req.job, stream=req.stream, media_type="application/x-ndjson", keep_alive=False,
                        result=lambda res: O.final(req, res, whole=True), events=lambda flow: _lines(flow, req))


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
