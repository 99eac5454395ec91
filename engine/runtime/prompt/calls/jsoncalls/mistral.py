"""The Mistral call family, both after ``[TOOL_CALLS]``: a JSON list,
``[TOOL_CALLS][{"name": NAME, "arguments": {...}}]`` (Nemo), or one call per marker,
``[TOOL_CALLS]NAME[ARGS]{...}`` (Small 3.2, Ministral 3, Devstral)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import (
    ToolFormat,
    _call_object,
    _closed,
    _json_rule,
    _repeat,
    _Scan,
    calls_between,
    name_then_json,
    text_lit,
    wrapped_call,
)


class Mistral(ToolFormat):
    def __init__(self):
        super().__init__("mistral", "Mistral [TOOL_CALLS] JSON list", "[TOOL_CALLS]", "]")

    def detects(self, template):
        return "[TOOL_CALLS]" in template and "[ARGS]" not in template

    def partial(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        if not s.take("[TOOL_CALLS]"):
            return [], 0
        s.ws()
        if not s.take("["):
            return [], 0
        calls, end = calls_between(text, "", "", wrapped_call, sep=",", last="]", start=s.pos)
        closed = calls and calls[-1].done and text[end - 1 : end] == "]"
        return calls, end if closed else 0

    def write(self, calls):
        return "[TOOL_CALLS]" + json.dumps(
            [{"name": n, "arguments": a, "id": f"{i:09d}"} for i, (n, a) in enumerate(calls)]
        )

    def body(self, tools, parallel, lit):
        items = {"anyOf": [_call_object(t, "name", "arguments") for t in tools]}
        arr = {"type": "array", "items": items, "minItems": 1}
        if not parallel:
            arr["maxItems"] = 1
        return f"call_body: {_json_rule(arr)}\n"


class MistralArgs(ToolFormat):
    CONTROL_MARKERS = ("[ARGS]", "[CALL_ID]")

    def __init__(self):
        super().__init__("mistral-args", "Mistral [TOOL_CALLS]name[ARGS]", "[TOOL_CALLS]", "}")

    def detects(self, template):
        return "[TOOL_CALLS]" in template and "[ARGS]" in template

    def partial(self, text, tools=()):
        # Small 3.2 writes an id between the name and the arguments
        return calls_between(
            text, "[TOOL_CALLS]", "", name_then_json("[ARGS]", lambda name: name.split("[CALL_ID]")[0])
        )

    def write(self, calls):
        return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(f"{text_lit(t.name)} {lit('[ARGS]')} {_json_rule(_closed(t.parameters))}" for t in tools)
        return f"one_call: {alts}\n" + _repeat("one_call", lit("[TOOL_CALLS]"), parallel)


MISTRAL = Mistral()
MISTRAL_ARGS = MistralArgs()
