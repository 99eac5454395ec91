"""POST /v1/completions (prompt as text or token ids)"""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from engine.server.generation import Shape, completion_logprobs, run
from engine.server.ondemand import hold, on_demand
from engine.server.request import json_body
from engine.server.schemas import parse_completion

SHAPE = Shape(
    object="text_completion",
    chunk_object="text_completion",
    id_prefix="cmpl-",
    final=lambda res: {"index": 0, "text": res.text, "logprobs": None, "finish_reason": res.finish_reason},
    deltas=lambda ev: (
        [{"index": 0, "text": ev.text, "logprobs": None, "finish_reason": None}] if (ev.text or ev.logprobs) else []
    ),
    logprobs=completion_logprobs,
    end=lambda finish: {"index": 0, "text": "", "logprobs": None, "finish_reason": finish},
)


@on_demand
async def completions(request: Request):
    body = await json_body(request)
    engine = request.app.state.engine
    parsed = parse_completion(
        body, await hold(request, body), engine.resolve, request.app.state.settings.request_defaults
    )
    return await run(request, parsed, SHAPE)


routes = [Route("/v1/completions", completions, methods=["POST"])]
