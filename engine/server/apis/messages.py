"""Anthropic's Messages API (``POST /v1/messages``) mapped to engine jobs and back: the
API Claude Code speaks (``ANTHROPIC_BASE_URL``).

``system`` (a string or text blocks) and ``messages`` with ``text``, ``tool_use``,
``tool_result`` and ``thinking`` blocks become a chat conversation; ``tools`` with
``input_schema`` the job's tools (server tools such as web search are skipped and named
in the ``x-mtp-studio-skipped-tools`` header); ``tool_choice`` auto / any / tool / none;
``thinking`` enabled with ``budget_tokens`` (the thinking budget) or disabled;
``stop_sequences``; the required ``max_tokens``. The job is decided where every request
is (:meth:`Engine.resolve <engine.runtime.engine.Engine.resolve>`).

The reply comes back as content blocks — ``thinking``, ``text``, ``tool_use`` — whole
(:func:`message_object`) or streamed as Anthropic's events (:class:`EventWriter`), with
``stop_reason`` end_turn / max_tokens / tool_use / stop_sequence and the prompt cache's
reuse as ``cache_read_input_tokens``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.prompt.tools import parse_choice, parse_tools
from engine.server.replyblocks import DELTA, START, STOP, TEXT, THINKING, TOOL, Block, BlockEvent
from engine.server.schemas import Resolve, bad, function_tools, get, model_of, sampling_of
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.prompt.chat import not_text
from engine.runtime.media import Media
from engine.runtime.media.intake import MediaPolicy
from engine.server.apis import mediaparts, thinking

log = logging.getLogger("mtp_studio.server")


@dataclass
class MessagesRequest:
    job: J.Generate
    model: str
    stream: bool
    stop_sequences: tuple[str, ...] = ()
    skipped_tools: list[str] = field(default_factory=list)


def conversation(body: Any, media: MediaPolicy = mediaparts.BYTES_ONLY) -> list[dict]:
    """``system`` and ``messages`` as chat messages (images as media parts, from where
    ``media`` allows)."""
    out: list[dict] = []
    system = body.get("system")
    if system is not None:
        text = _text(system, "system")
        if text:
            out.append({"role": "system", "content": text})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise bad(f"{where} must be {{'role': 'user' | 'assistant', 'content': ...}}", "messages")
        content = m.get("content")
        if m["role"] == "system":  # Claude Code sends reminders as system turns between the others
            out.append({"role": "system", "content": _text(content, f"{where}.content")})
            continue
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise bad(f"{where}.content must be a string or a list of content blocks", "messages")
        if m["role"] == "assistant":
            out.append(_assistant(content, where))
        else:
            out.extend(_user(content, where, media))
    return out


def _text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for j, b in enumerate(value):
            kind = b.get("type") if isinstance(b, dict) else type(b).__name__
            if kind != "text":
                raise bad(not_text(f"{where}[{j}]", f"a {kind!r} block"), "messages")
            out_text = b.get("text", "")
            parts.append(out_text if isinstance(out_text, str) else "")
        return "\n\n".join(p for p in parts if p)
    raise bad(f"{where} must be a string or a list of text blocks", "messages")


def _assistant(blocks: list, where: str) -> dict:
    msg: dict = {"role": "assistant", "content": ""}
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            msg["content"] += str(b.get("text", ""))
        elif kind == "thinking":
            msg["reasoning_content"] = msg.get("reasoning_content", "") + str(b.get("thinking", ""))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            if not isinstance(b.get("name"), str) or not isinstance(b.get("id"), str):
                raise bad(f"{where}.content[{j}]: a tool_use block needs 'id' and 'name'", "messages")
            args = b.get("input") if isinstance(b.get("input"), dict) else {}
            msg.setdefault("tool_calls", []).append(
                {"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": args}}
            )
        else:
            raise bad(f"{where}.content[{j}] is a {kind!r} block, which an assistant turn here cannot hold", "messages")
    return msg


def _user(blocks: list, where: str, media: MediaPolicy) -> list[dict]:
    """A user turn's blocks: tool results (each its own tool message, first), then its
    text and images in order."""
    out: list[dict] = []
    pieces: list[str | Media] = []
    for j, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else type(b).__name__
        if kind == "text":
            pieces.append(str(b.get("text", "")))
        elif kind == "image":
            pieces.append(mediaparts.anthropic_image(b, f"{where}.content[{j}]", media))
        elif kind == "tool_result":
            if not isinstance(b.get("tool_use_id"), str):
                raise bad(f"{where}.content[{j}]: a tool_result block needs 'tool_use_id'", "messages")
            result = _result(b.get("content", ""), f"{where}.content[{j}].content", media)
            if b.get("is_error"):
                result = [p for p in result if not isinstance(p, str) or p]
                first = result.pop(0) if result and isinstance(result[0], str) else ""
                result = ["Error: " + first, *result]
            content = mediaparts.content(result, "\n\n")
            out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": content})
        else:
            raise bad(not_text(f"{where}.content[{j}]", f"a {kind!r} block"), "messages")
    if pieces:  # separate blocks (Claude Code's reminders, then the prompt) stay apart
        out.append({"role": "user", "content": mediaparts.content(pieces, "\n\n")})
    return out


def _result(content: Any, where: str, media: MediaPolicy) -> list[str | Media]:
    """A ``tool_result``'s content (a string, or text and image blocks: Claude Code's
    screenshots) as its text and images in order."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of text and image blocks", "messages")
    pieces: list[str | Media] = []
    for k, b in enumerate(content):
        kind = b.get("type") if isinstance(b, dict) else type(b).__name__
        if kind == "image":
            pieces.append(mediaparts.anthropic_image(b, f"{where}[{k}]", media))
        elif kind == "text":
            pieces.append(b["text"] if isinstance(b.get("text"), str) else "")
        else:
            raise bad(not_text(f"{where}[{k}]", f"a {kind!r} block"), "messages")
    return pieces


def _function(t: dict) -> dict | None:
    if "input_schema" not in t or t.get("type") not in (None, "custom"):
        return None  # a server tool (web search, code execution, …): skipped
    return {"name": t.get("name"), "description": t.get("description", ""), "parameters": t["input_schema"]}


def _choice(raw: Any) -> tuple[Any, bool | None]:
    """``tool_choice`` in the chat API's terms, and whether calls may come in parallel."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict) or raw.get("type") not in ("auto", "any", "tool", "none"):
        raise bad("tool_choice must be {'type': 'auto' | 'any' | 'tool' | 'none'}", "tool_choice")
    parallel = None if raw.get("disable_parallel_tool_use") is None else not raw["disable_parallel_tool_use"]
    kind = raw["type"]
    if kind == "tool":
        if not isinstance(raw.get("name"), str):
            raise bad("tool_choice {'type': 'tool'} needs 'name'", "tool_choice")
        return {"type": "function", "function": {"name": raw["name"]}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def parse(
    body: Any,
    models: dict[str, ModelInfo],
    resolve: Resolve,
    defaults: J.Defaults | None,
    *,
    count_only: bool = False,
    media: MediaPolicy = mediaparts.BYTES_ONLY,
) -> MessagesRequest:
    """``body`` as a resolved job (``media``: where its images may come from besides their
    own bytes, the endpoint's settings)."""
    model = model_of(body, models)
    max_tokens = body.get("max_tokens")
    if not count_only and max_tokens is None:  # Anthropic's API requires it; its range is the decider's
        raise bad("'max_tokens' is required: the most tokens the reply may have (an integer >= 1)", "max_tokens")
    messages = conversation(body, media)
    tools, skipped = function_tools(body.get("tools"), _function)
    choice, parallel = _choice(body.get("tool_choice"))
    try:
        parsed_tools = parse_tools(tools)
        tool_choice = parse_choice(choice, parsed_tools)
    except InvalidRequestError as e:
        raise bad(str(e), e.param) from None
    if skipped:
        log.info("messages: skipped tools this endpoint cannot run: %s", ", ".join(skipped))
    thinks = thinking.anthropic(body.get("thinking"))
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("'stop_sequences' must be a list of strings", "stop_sequences")
    job = J.Generate(
        model=model,
        messages=messages,
        max_tokens=max_tokens if not count_only else 1,
        stop=tuple(stops),
        **sampling_of(body),
        tools=parsed_tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        **thinks.job_fields(),
        rounds=False,
        defaults=defaults,
    )
    return MessagesRequest(resolve(job), model, bool(get(body, "stream", (bool,), False)), tuple(stops), skipped)


# ----------------------------------------------------------------- output
#: Anthropic's words for how a reply ended (J.Ending: a tool call cut short is "max_tokens",
#: never "tool_use", so no client runs an unfinished call)
STOP_REASONS = {
    J.Ending.END_TURN: "end_turn",
    J.Ending.STOP_STRING: "stop_sequence",
    J.Ending.TOOL_CALLS: "tool_use",
    J.Ending.CUT: "max_tokens",
}


def stop_reason(res: J.GenerateResult, req: MessagesRequest) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence``."""
    ending = res.ending
    # the reply ends before the stop string; which one it was is known when there is one
    seq = req.stop_sequences[0] if ending is J.Ending.STOP_STRING and len(req.stop_sequences) == 1 else None
    return STOP_REASONS[ending], seq


def usage(res: J.GenerateResult) -> dict:
    reused = res.stats.prompt_tokens_reused
    # Anthropic counts cached tokens apart from input_tokens (the three add up to the prompt)
    return {
        "input_tokens": res.prompt_tokens - reused,
        "output_tokens": len(res.tokens),
        "cache_read_input_tokens": reused,
        "cache_creation_input_tokens": 0,
    }


def _block(b: Block, done: bool) -> dict:
    if b.kind == THINKING:
        return {"type": "thinking", "thinking": b.text if done else "", "signature": ""}
    if b.kind == TEXT:
        return {"type": "text", "text": b.text if done else ""}
    assert b.call is not None
    args = _input(b.text) if done else {}
    return {"type": "tool_use", "id": _tool_id(b.call.id), "name": b.call.name, "input": args}


def _input(arguments: str) -> dict:
    """A call's arguments as the object Anthropic's ``input`` is (a call cut off by
    ``max_tokens`` may not be whole JSON: its arguments are then as far as they parse)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def content_of(res: J.GenerateResult) -> list[dict]:
    reply = res.reply
    if reply is None:
        return [{"type": "text", "text": res.text}]
    out: list[dict] = []
    if reply.reasoning:
        out.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
    if reply.content or not reply.calls:
        out.append({"type": "text", "text": reply.content})
    for c in reply.calls:
        out.append({"type": "tool_use", "id": _tool_id(c.id), "name": c.name, "input": _input(c.arguments)})
    return out


def message_object(mid: str, req: MessagesRequest, res: J.GenerateResult) -> dict:
    reason, seq = stop_reason(res, req)
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": content_of(res),
        "stop_reason": reason,
        "stop_sequence": seq,
        "usage": usage(res),
    }


def sse(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, separators=(',', ':'))}\n\n".encode()


PING = sse("ping", {})


class EventWriter:
    """Anthropic's streamed events for one message."""

    def __init__(self, mid: str, req: MessagesRequest):
        self.mid, self.req = mid, req

    def opening(self) -> bytes:
        msg = {
            "id": self.mid,
            "type": "message",
            "role": "assistant",
            "model": self.req.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            },
        }
        return sse("message_start", {"message": msg})

    def block(self, ev: BlockEvent) -> bytes:
        b = ev.block
        if ev.what == START:
            return sse("content_block_start", {"index": b.index, "content_block": _block(b, False)})
        if ev.what == DELTA:
            if b.kind == TOOL:
                delta = {"type": "input_json_delta", "partial_json": ev.delta}
            elif b.kind == THINKING:
                delta = {"type": "thinking_delta", "thinking": ev.delta}
            else:
                delta = {"type": "text_delta", "text": ev.delta}
            return sse("content_block_delta", {"index": b.index, "delta": delta})
        assert ev.what == STOP
        out = b""
        if b.kind == THINKING:  # clients keep the signature to send the block back; there is none here
            out = sse("content_block_delta", {"index": b.index, "delta": {"type": "signature_delta", "signature": ""}})
        return out + sse("content_block_stop", {"index": b.index})

    def closing(self, res: J.GenerateResult) -> bytes:
        reason, seq = stop_reason(res, self.req)
        return sse(
            "message_delta", {"delta": {"stop_reason": reason, "stop_sequence": seq}, "usage": usage(res)}
        ) + sse("message_stop", {})

    @staticmethod
    def error(kind: str, message: str) -> bytes:
        return sse("error", {"error": {"type": kind, "message": message}})
