"""POST /v1/chat/completions"""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from engine.server.generation import Shape, chat_logprobs, run
from engine.server.request import json_body
from engine.server.schemas import parse_chat

SHAPE = Shape(
    object="chat.completion",
    chunk_object="chat.completion.chunk",
    id_prefix="chatcmpl-",
    final=lambda text, finish: {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "logprobs": None,
        "finish_reason": finish,
    },
    delta=lambda text, first: {
        "index": 0,
        "delta": {"role": "assistant", "content": text} if first else {"content": text},
        "logprobs": None,
        "finish_reason": None,
    },
    logprobs=chat_logprobs,
    end=lambda finish: {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish},
)


async def chat_completions(request: Request):
    body = await json_body(request)
    parsed = parse_chat(body, request.app.state.engine.models(), request.app.state.settings.request_defaults)
    return await run(request, parsed, SHAPE)


routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"])]
