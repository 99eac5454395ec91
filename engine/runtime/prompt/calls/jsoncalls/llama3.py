"""The Llama 3.x call family: ``{"name": NAME, "parameters": {...}}``, optionally after
``<|python_tag|>``, several separated by ``; ``."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import (
    ToolFormat,
    _call_object,
    _json_rule,
    _repeat,
    _Scan,
    calls_between,
    wrapped_call,
)


class Llama3(ToolFormat):
    CONTROL_MARKERS = ("<|python_tag|>",)

    def __init__(self):
        super().__init__("llama3", "Llama 3.x JSON", "", "}")

    def detects(self, template):
        return "<|python_tag|>" in template or ("<|start_header_id|>" in template and '"parameters"' in template)

    def partial(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        s.take("<|python_tag|>")
        return calls_between(text, "", "", wrapped_call, sep=";", start=s.pos)

    def write(self, calls):
        return "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(_json_rule(_call_object(t, "name", "parameters")) for t in tools)
        return f"one_call: {alts}\n" + _repeat("one_call", '"; "', parallel)


LLAMA3 = Llama3()
