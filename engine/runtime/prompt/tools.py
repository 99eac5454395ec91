"""Tools a request offers the model, which of them it may call, and the conversation's
tool turns, checked the way an OpenAI client expects (a 400 naming the field at fault).

* :func:`parse_tools` reads ``tools`` (``[{"type": "function", "function": {name,
  description, parameters}}]``); every tool's ``parameters`` must be a JSON schema the
  grammar engine can use, because calls are constrained by it.
* :func:`parse_choice` reads ``tool_choice``: ``"auto"``, ``"none"``, ``"required"`` or
  ``{"type": "function", "function": {"name": ...}}`` (a tool that must exist).
* :func:`normalize_messages` gives the model's template what llama.cpp gives it: a
  ``developer`` message as a system one, an assistant's ``tool_calls`` with ``arguments``
  as a mapping (clients send a JSON string),
  ``reasoning_content`` kept, and every ``tool`` message answering a call made before it.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from engine.errors import InvalidRequestError

#: the most tools one request may offer
MAX_TOOLS = 128
#: what tool_choice may say besides naming a function
CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    #: the arguments' JSON schema (an object schema)
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}}, compare=False, hash=False)
    #: the schema as canonical JSON (identity, and the grammar's text)
    schema_json: str = ""

    def to_template(self) -> dict:
        """The tool as chat templates receive it (OpenAI's shape)."""
        fn: dict[str, Any] = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: arguments as JSON text (OpenAI's shape)."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: new_call_id())

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "auto" | "none" | "required" | "named"
    name: str | None = None

    def allowed(self, tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """The tools a call may name under this choice."""
        if self.mode == "none":
            return ()
        if self.mode == "named":
            return tuple(t for t in tools if t.name == self.name)
        return tools

    @property
    def must_call(self) -> bool:
        return self.mode in ("required", "named")


def _bad(message: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


def parse_tools(raw: Any, param: str = "tools") -> tuple[Tool, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _bad("'tools' must be a list of {'type': 'function', 'function': {...}} objects", param)
    if len(raw) > MAX_TOOLS:
        raise _bad(f"at most {MAX_TOOLS} tools are accepted, got {len(raw)}", param)
    out: list[Tool] = []
    seen: set[str] = set()
    for i, t in enumerate(raw):
        where = f"{param}[{i}]"
        if (
            not isinstance(t, dict)
            or t.get("type", "function") != "function"
            or not isinstance(t.get("function"), dict)
        ):
            raise _bad(
                f"{where} must be {{'type': 'function', 'function': {{'name': ..., 'parameters': {{...}}}}}}", param
            )
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not name or len(name) > 64 or any(c.isspace() or c in "<>\"'" for c in name):
            raise _bad(
                f"{where}.function.name must be a non-empty name without spaces, quotes or angle brackets", param
            )
        if name in seen:
            raise _bad(f"{where}: the tool name '{name}' is given twice", param)
        seen.add(name)
        desc = fn.get("description") or ""
        if not isinstance(desc, str):
            raise _bad(f"{where}.function.description must be a string", param)
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise _bad(f"{where}.function.parameters must be a JSON schema object", param)
        if params.get("type", "object") != "object":
            raise _bad(f"{where}.function.parameters must describe an object (type 'object')", param)
        out.append(Tool(name, desc, params, json.dumps(params, sort_keys=True, separators=(",", ":"))))
    return tuple(out)


def check_tool_schemas(tools: tuple[Tool, ...], param: str = "tools") -> None:
    """Every tool's parameters compile as a JSON schema (calls are constrained by them;
    keywords the grammar engine does not implement are ignored, not refused)."""
    from engine.runtime.decode.grammar import GrammarSpec, compile_grammar

    for i, t in enumerate(tools):
        try:
            compile_grammar(GrammarSpec("tool_schema", t.schema_json, param))
        except InvalidRequestError as e:
            raise _bad(f"{param}[{i}] ('{t.name}'): its parameters are not a usable JSON schema: {e}", param) from None


def parse_choice(raw: Any, tools: tuple[Tool, ...], param: str = "tool_choice") -> ToolChoice | None:
    """The request's ``tool_choice`` (None when it gives none: the request step decides)."""
    if raw is None:
        return None
    if isinstance(raw, str):
        if raw not in CHOICES:
            raise _bad(f"'tool_choice' must be one of {', '.join(CHOICES)} or a named function, got {raw!r}", param)
        choice = ToolChoice(raw)
    elif (
        isinstance(raw, dict) and isinstance(raw.get("function"), dict) and isinstance(raw["function"].get("name"), str)
    ):
        choice = ToolChoice("named", raw["function"]["name"])
    else:
        raise _bad(
            "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}", param
        )
    if choice.mode in ("required", "named") and not tools:
        raise _bad(f"'tool_choice' {choice.mode!r} needs 'tools'", param)
    if choice.mode == "named" and not choice.allowed(tools):
        known = ", ".join(t.name for t in tools)
        raise _bad(f"'tool_choice' names '{choice.name}', which is not among the tools ({known})", param)
    return choice


def _cut(raw: str) -> dict | None:
    """Arguments a reply cut by ``max_tokens`` ended inside (prompt.reply delivers them as
    far as they were written, as OpenAI does), sent back as an earlier turn: the object
    they began, closed; None when they are not the start of one."""
    from engine.runtime.prompt.calls.partial import closing

    try:
        value = json.loads(raw + closing(raw))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _arguments(raw: Any, where: str) -> dict:
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = _cut(raw)
        if value is None:
            raise _bad(
                f"{where}.function.arguments must be a JSON object (as text), got {raw[:60]!r}", "messages"
            ) from None
        if isinstance(value, dict):
            return value
    raise _bad(f"{where}.function.arguments must be a JSON object", "messages")


def normalize_messages(messages: list[dict]) -> list[dict]:
    """``messages`` as templates expect them: tool-call arguments as mappings, and every
    ``tool`` message answering a call of an earlier assistant turn (by ``tool_call_id``
    when it gives one). Raises :class:`InvalidRequestError` naming the message."""
    out: list[dict] = []
    open_ids: set[str] = set()
    calls_seen = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            out.append(m)
            continue
        role = m.get("role")
        if role == "developer":  # OpenAI's newer name for the instructions a system message gives
            m, role = {**m, "role": "system"}, "system"
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise _bad(f"messages[{i}].tool_calls must be a list", "messages")
            fixed = []
            for j, c in enumerate(calls):
                where = f"messages[{i}].tool_calls[{j}]"
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise _bad(
                        f"{where} must be {{'id': ..., 'type': 'function', 'function': {{'name', 'arguments'}}}}",
                        "messages",
                    )
                args = _arguments(fn.get("arguments"), where)
                cid = c.get("id") or f"call_{i}_{j}"
                open_ids.add(cid)
                fixed.append({"id": cid, "type": "function", "function": {"name": fn["name"], "arguments": args}})
            calls_seen = True
            m = {**m, "tool_calls": fixed}
        elif role == "tool":
            cid = m.get("tool_call_id")
            if not calls_seen:
                raise _bad(
                    f"messages[{i}] is a tool result, but no assistant message before it called a tool", "messages"
                )
            if cid is not None and cid not in open_ids:
                raise _bad(
                    f"messages[{i}] answers tool call '{cid}', which no assistant message before it made", "messages"
                )
        out.append(m)
    return out
