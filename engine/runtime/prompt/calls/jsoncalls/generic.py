"""The generic call format, ``{"tool_call": {"name": NAME, "arguments": {...}}}`` (or
``{"tool_calls": [...]}``): for templates with no call format of their own, which are
told about the tools in a system message (llama-server's way)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _call_object, _json_rule, _Scan, calls_between, wrapped_call
from engine.runtime.prompt.calls.partial import Partial
from engine.runtime.prompt.tools import Tool


class Generic(ToolFormat):
    def __init__(self):
        super().__init__("generic", "generic JSON (tools described in a system message)", "", "}")

    def detects(self, template):
        return True  # the fallback: last in the registry

    def partial(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        if not s.take("{"):
            return [], 0
        s.ws()
        if s.take('"tool_call"'):
            s.ws()
            if not s.take(":"):
                return [], 0
            p, e = wrapped_call(text, s.pos)
            if p is None or e is None or e < 0:  # not yet, or not a call (a named one ends where it broke)
                return (
                    [] if p is None else [p if e is None or p.stop is not None else Partial(p.name, p.args, stop=s.pos)]
                ), 0
            calls = [Partial(p.name, p.args)]
            s.pos = e
        elif s.take('"tool_calls"'):
            s.ws()
            if not s.take(":"):
                return [], 0
            s.ws()
            if not s.take("["):
                return [], 0
            at = s.pos
            calls, end = calls_between(text, "", "", wrapped_call, sep=",", last="]", start=at)
            if not (calls and calls[-1].done and text[end - 1 : end] == "]"):
                return [Partial(c.name, c.args, stop=c.stop) for c in calls], 0
            s.pos = end
        else:
            return [], 0
        s.ws()
        if not s.take("}"):
            return [Partial(c.name, c.args) for c in calls], 0
        return [Partial(c.name, c.args, True) for c in calls], s.pos

    def write(self, calls):
        if len(calls) == 1:
            return json.dumps({"tool_call": {"name": calls[0][0], "arguments": calls[0][1]}})
        return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]})

    def body(self, tools, parallel, lit):
        one = {"anyOf": [_call_object(t, "name", "arguments") for t in tools]}
        schema = {
            "type": "object",
            "properties": {"tool_call": one},
            "required": ["tool_call"],
            "additionalProperties": False,
        }
        if parallel:
            many = {
                "type": "object",
                "properties": {"tool_calls": {"type": "array", "items": one, "minItems": 1}},
                "required": ["tool_calls"],
                "additionalProperties": False,
            }
            schema = {"anyOf": [schema, many]}
        return f"call_body: {_json_rule(schema)}\n"

    @staticmethod
    def system_prompt(tools: tuple[Tool, ...]) -> str:
        """How the generic format tells a model about the tools (llama-server's way)."""
        listing = "\n".join(json.dumps(t.to_template()["function"], ensure_ascii=False) for t in tools)
        return (
            "You can call these tools:\n" + listing + "\n\nTo call a tool, reply with only a JSON object: "
            '{"tool_call": {"name": <tool name>, "arguments": {<arguments>}}}. Otherwise answer normally.'
        )


GENERIC = Generic()
