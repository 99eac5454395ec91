"""The generic call format, ``{"tool_call": {"name": NAME, "arguments": {...}}}`` (or
``{"tool_calls": [...]}``): for templates with no call format of their own, which are
told about the tools in a system message (llama-server's way)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import _FAIL, ToolFormat, _call, _call_object, _json_rule, _Scan
from engine.runtime.prompt.tools import Tool


class Generic(ToolFormat):
    def __init__(self):
        super().__init__("generic", "generic JSON (tools described in a system message)", "", "}")

    def detects(self, template):
        return True  # the fallback: last in the registry

    def scan(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        obj = s.json()
        if obj is _FAIL or not isinstance(obj, dict):
            return [], 0
        raw = obj.get("tool_calls") if "tool_calls" in obj else [obj.get("tool_call")]
        if not isinstance(raw, list) or not raw:
            return [], 0
        calls = [_call(c.get("name"), c.get("arguments", {})) if isinstance(c, dict) else None for c in raw]
        if any(c is None for c in calls):
            return [], 0
        return calls, s.pos  # type: ignore[return-value]

    def write(self, calls):
        if len(calls) == 1:
            return json.dumps({"tool_call": {"name": calls[0][0], "arguments": calls[0][1]}})
        return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]})

    def body(self, tools, parallel, lit):
        one = {"anyOf": [_call_object(t, "name", "arguments") for t in tools]}
        schema = {"type": "object", "properties": {"tool_call": one}, "required": ["tool_call"], "additionalProperties": False}
        if parallel:
            many = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": one, "minItems": 1}},
                    "required": ["tool_calls"], "additionalProperties": False}  # fmt: skip
            schema = {"anyOf": [schema, many]}
        return f"call_body: {_json_rule(schema)}\n"

    @staticmethod
    def system_prompt(tools: tuple[Tool, ...]) -> str:
        """How the generic format tells a model about the tools (llama-server's way)."""
        listing = "\n".join(json.dumps(t.to_template()["function"], ensure_ascii=False) for t in tools)
        return ("You can call these tools:\n" + listing + "\n\nTo call a tool, reply with only a JSON object: "
                '{"tool_call": {"name": <tool name>, "arguments": {<arguments>}}}. Otherwise answer normally.')  # fmt: skip


GENERIC = Generic()
