"""OpenAI's Responses API (``POST /v1/responses``) mapped to engine jobs and back: the API
Codex CLI and openai-agents speak.

A request's ``instructions`` and ``input`` items become a chat conversation (messages,
``function_call`` and ``function_call_output`` items as tool turns, ``reasoning`` items as
the next assistant turn's ``reasoning_content``); function ``tools`` become the job's
tools, and the tool types a local model cannot run (``web_search``, ``local_shell``,
``custom``, ``namespace``, MCP, …) are skipped and named in the ``x-mtp-studio-skipped-tools``
response header and the log. ``text.format`` becomes the job's grammar, ``reasoning.effort``
thinking on, off or a budget. The job is then decided where every request is
(:meth:`Engine.resolve <engine.runtime.engine.Engine.resolve>`).

The reply comes back as output items — a ``reasoning`` item, a ``message`` with one
``output_text`` part, a ``function_call`` per call — whole or streamed as OpenAI's event sequence
(:mod:`engine.server.apis.responses_out`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.prompt.tools import parse_choice, parse_tools
from engine.server.schemas import Resolve, bad, function_tools, get, model_of, sampling_of
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.prompt.chat import not_text
from engine.runtime.media import Media
from engine.runtime.media.intake import MediaPolicy
from engine.server.apis import mediaparts, thinking

log = logging.getLogger("mtp_studio.server")

#: input items that carry no text a model here could use (they come with tools it skips)
_SKIPPED_ITEMS = (
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "image_generation_call",
    "code_interpreter_call",
    "item_reference",
    "compaction",
)


@dataclass
class ResponsesRequest:
    """A parsed Responses request: the job, and what the response echoes."""

    job: J.Generate
    model: str
    stream: bool
    store: bool
    #: the conversation the job renders, without the instructions (kept for
    #: ``previous_response_id``)
    history: list[dict]
    instructions: str | None
    previous_response_id: str | None
    skipped_tools: list[str] = field(default_factory=list)
    echo: dict = field(default_factory=dict)


def parse(
    body: Any,
    models: dict[str, ModelInfo],
    resolve: Resolve,
    defaults: J.Defaults | None,
    previous: list[dict] | None = None,
    media: MediaPolicy = mediaparts.BYTES_ONLY,
) -> ResponsesRequest:
    """``body`` as a resolved job. ``previous``: the conversation of the response named by
    ``previous_response_id`` (the route looks it up); ``media``: where its images may
    come from besides their own bytes (the endpoint's settings)."""
    model = model_of(body, models)
    instructions = get(body, "instructions", (str,), None)
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        items: list = [{"type": "message", "role": "user", "content": raw_input}]
    elif isinstance(raw_input, list):
        items = raw_input
    elif raw_input is None and previous:
        items = []
    else:
        raise bad("'input' must be a string or a list of input items", "input")
    history = [*(previous or []), *input_messages(items, media)]
    if not history:
        raise bad("'input' is empty: give at least one message", "input")
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + history
    tools, skipped = function_tools(body.get("tools"), _function)
    try:
        parsed_tools = parse_tools(tools)
        choice = parse_choice(_tool_choice(body.get("tool_choice")), parsed_tools)
    except InvalidRequestError as e:
        raise bad(str(e), e.param) from None
    if skipped:
        log.info("responses: skipped tools this endpoint cannot run: %s", ", ".join(skipped))
    thinks = thinking.responses(body.get("reasoning"))
    max_tokens = get(body, "max_output_tokens", (int,), None)
    stop = body.get("stop")  # not OpenAI's, but llama-server's and agents' habit
    job = resolve(
        J.Generate(
            model=model,
            messages=messages,
            max_tokens=max_tokens,
            stop=tuple(stop) if isinstance(stop, list) else ((stop,) if isinstance(stop, str) else ()),
            **sampling_of(body),
            grammar=_format(body.get("text")),
            tools=parsed_tools,
            tool_choice=choice,
            parallel_tool_calls=get(body, "parallel_tool_calls", (bool,), None),
            **thinks.job_fields(),
            rounds=False,
            defaults=defaults,
        )
    )
    echo = {
        "instructions": instructions,
        "tools": [t for t in (body.get("tools") or []) if isinstance(t, dict) and t.get("type") == "function"],
        "tool_choice": body.get("tool_choice", "auto"),
        # what the job runs with, decided by the one decider (a default is not written twice)
        "parallel_tool_calls": job.parallel_tool_calls,
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "text": body.get("text") or {"format": {"type": "text"}},
        "metadata": body.get("metadata") or {},
        "max_output_tokens": max_tokens,
        "temperature": job.temperature,
        "top_p": job.top_p,
        "truncation": "disabled",
        "user": body.get("user"),
    }
    return ResponsesRequest(
        job,
        model,
        bool(get(body, "stream", (bool,), False)),
        bool(get(body, "store", (bool,), True)),
        history,
        instructions,
        get(body, "previous_response_id", (str,), None),
        skipped,
        echo,
    )


# ------------------------------------------------------------------ input
def _pieces(content: Any, where: str, media: MediaPolicy | None) -> list[str | Media]:
    """The text and images of a message's ``content`` (``where``): a string, or content
    parts (text, and ``input_image`` parts unless ``media`` is None: an assistant turn's
    or reasoning's; others refused by name), in order."""
    if isinstance(content, str):
        return [content]
    if content is None:
        return []
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of content parts", "input")
    out: list[str | Media] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            out.append(str(part.get("text", "")))
        elif kind == "refusal":
            out.append(str(part.get("refusal", "")))
        elif kind == "input_image" and media is not None:
            out.append(mediaparts.input_image(part, f"{where}[{j}]", media))
        elif kind == "input_image":
            raise bad(f"{where}[{j}] is an image in an assistant turn, which a turn here cannot hold", "input")
        else:
            raise bad(not_text(f"{where}[{j}]", f"a {kind!r} part"), "input")
    return out


def _text_of(content: Any, where: str) -> str:
    """The text of an assistant turn's or reasoning's ``content`` (``where``)."""
    return "".join(p for p in _pieces(content, where, None) if isinstance(p, str))


def input_messages(items: list, media: MediaPolicy = mediaparts.BYTES_ONLY) -> list[dict]:
    """Responses input items as chat messages (tool calls grouped into one assistant turn,
    reasoning attached to the assistant turn it preceded; images as media parts, from
    where ``media`` allows)."""
    out: list[dict] = []
    reasoning: list[str] = []

    def assistant() -> dict:
        """The assistant turn the next call or reasoning belongs to."""
        if out and out[-1]["role"] == "assistant" and not out[-1].get("_closed"):
            return out[-1]
        msg: dict = {"role": "assistant", "content": ""}
        out.append(msg)
        return msg

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(f"{where} must be an object", "input")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise bad(f"{where}.role must be user, system, developer or assistant, got {role!r}", "input")
            if role == "assistant":
                text = _text_of(item.get("content"), f"{where}.content")
                msg = assistant()
                msg["content"] = (msg["content"] + text) if msg["content"] else text
                _attach(msg, reasoning)
            else:
                if out and out[-1]["role"] == "assistant":
                    out[-1]["_closed"] = True
                reasoning.clear()  # reasoning belongs to the assistant turn right after it
                content = mediaparts.content(_pieces(item.get("content"), f"{where}.content", media))
                out.append({"role": "system" if role == "developer" else role, "content": content})
        elif kind == "function_call":
            name, call_id = item.get("name"), item.get("call_id") or item.get("id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise bad(f"{where}: a function_call needs 'name' and 'call_id'", "input")
            msg = assistant()
            _attach(msg, reasoning)
            args = item.get("arguments") or "{}"
            msg.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            )
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise bad(f"{where}: a function_call_output needs 'call_id'", "input")
            output = item.get("output")
            text = output if isinstance(output, str) else mediaparts.content(_pieces(output, f"{where}.output", media))
            if out and out[-1]["role"] == "assistant":
                out[-1]["_closed"] = True
            reasoning.clear()
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            reasoning.append(_text_of(parts, f"{where}.content") if isinstance(parts, list) else "")
        elif kind in _SKIPPED_ITEMS:
            continue
        else:
            raise bad(f"{where}: input items of type {kind!r} are not supported", "input")
    for m in out:
        m.pop("_closed", None)
    return out


def _function(t: dict) -> dict | None:
    if t.get("type") != "function":
        return None  # web_search, local_shell, custom, namespace, MCP, …: skipped
    return {k: t[k] for k in ("name", "description", "parameters") if k in t}


def _attach(msg: dict, reasoning: list[str]) -> None:
    """Give the assistant turn ``msg`` the reasoning items that came before it (added to
    any it has: a turn may think before each of its calls)."""
    if reasoning:
        msg["reasoning_content"] = msg.get("reasoning_content", "") + "".join(reasoning)
        reasoning.clear()


def _tool_choice(raw: Any) -> Any:
    if isinstance(raw, dict):
        if raw.get("type") == "function" and isinstance(raw.get("name"), str):
            return {"type": "function", "function": {"name": raw["name"]}}
        if raw.get("type") == "allowed_tools":
            return raw.get("mode", "auto")
        return "auto"  # a hosted tool's choice: its tool is skipped, the model may still call the others
    return raw


def _format(text: Any) -> GrammarSpec | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise bad("'text' must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec("json_object", param="text.format")
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise bad(
                "text.format json_schema needs {'type': 'json_schema', 'name': ..., 'schema': {...}}", "text.format"
            )
        return GrammarSpec.json_schema(schema, param="text.format")
    raise bad("text.format type must be 'text', 'json_object' or 'json_schema'", "text.format")
