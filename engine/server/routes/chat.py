"""POST /v1/chat/completions"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from engine.runtime import jobs as J
from engine.runtime.prompt.reply import CALL_ARGS, CALL_START, CONTENT, REASONING
from engine.server.generation import Shape, chat_logprobs, run
from engine.server.apis.mediaparts import chat_messages
from engine.server.ondemand import hold, on_demand
from engine.server.request import json_body
from engine.server.schemas import Parsed, parse_chat
from engine.server.settings import ServerSettings


def _message(res: J.GenerateResult) -> dict:
    """The reply as OpenAI's assistant message: thinking in ``reasoning_content``, calls in
    ``tool_calls`` (``content`` null when there is only a call)."""
    reply = res.reply
    if reply is None:
        return {"role": "assistant", "content": res.text}
    msg: dict = {"role": "assistant", "content": reply.content if (reply.content or not reply.calls) else None}
    if reply.reasoning:  # both names: clients disagree (llama.cpp and vLLM's, OpenRouter's)
        msg["reasoning_content"] = msg["reasoning"] = reply.reasoning
    if reply.calls:
        msg["tool_calls"] = [c.to_openai() for c in reply.calls]
    return msg


def _choice(delta: dict) -> dict:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}


def _deltas(ev: J.Tokens) -> list[dict]:
    """The streamed choices of one engine event: content, reasoning_content, and each call
    as its id and name when the name is written, then its arguments under the same index
    as they are written."""
    if ev.parts is None:
        return [_choice({"content": ev.text})] if (ev.text or ev.logprobs) else []
    out = []
    for p in ev.parts:
        if p.kind == REASONING:
            out.append(_choice({"reasoning_content": p.text, "reasoning": p.text}))
        elif p.kind == CONTENT:
            out.append(_choice({"content": p.text}))
        elif p.kind == CALL_START and p.call is not None:
            c = p.call
            head = {"index": p.index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
            out.append(_choice({"tool_calls": [head]}))
        elif p.kind == CALL_ARGS:
            out.append(_choice({"tool_calls": [{"index": p.index, "function": {"arguments": p.text}}]}))
    if not out and ev.logprobs:
        out.append(_choice({"content": ""}))
    return out


SHAPE = Shape(
    object="chat.completion",
    chunk_object="chat.completion.chunk",
    id_prefix="chatcmpl-",
    final=lambda res: {"index": 0, "message": _message(res), "logprobs": None, "finish_reason": res.finish_reason},
    deltas=_deltas,
    logprobs=chat_logprobs,
    end=lambda finish: {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish},
    opening=_choice({"role": "assistant", "content": ""}),
)


def _parse(body: Any, models: dict, resolve, settings: ServerSettings) -> Parsed:
    """The body as a resolved job, its images and audio as media parts first (in the
    thread pool: a URL fetch or a large image's decoding would hold the event loop)."""
    if isinstance(body, dict) and "messages" in body:
        body = {**body, "messages": chat_messages(body["messages"], settings.media_policy)}
    return parse_chat(body, models, resolve, settings.request_defaults)


@on_demand
async def chat_completions(request: Request):
    body = await json_body(request)
    engine = request.app.state.engine
    models = await hold(request, body)
    parsed = await run_in_threadpool(_parse, body, models, engine.resolve, request.app.state.settings)
    return await run(request, parsed, SHAPE)


routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"])]
