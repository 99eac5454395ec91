"""The Nemotron Nano v2 call family: a JSON list in one tag,
``<TOOLCALL>[{"name": NAME, "arguments": {...}}, …]</TOOLCALL>`` (NVIDIA Nemotron Nano 9B/12B v2)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _call_object, _json_rule, _Scan, calls_between, wrapped_call


class Nemotron(ToolFormat):
    OPEN, CLOSE = "<TOOLCALL>", "</TOOLCALL>"

    def __init__(self):
        super().__init__("nemotron", "Nemotron <TOOLCALL>[JSON list]", self.OPEN, self.CLOSE)

    def detects(self, template):
        return self.OPEN in template and self.CLOSE in template

    def partial(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        if not s.take(self.OPEN):
            return [], 0
        s.ws()
        if not s.take("["):
            return [], 0
        calls, end = calls_between(text, "", "", wrapped_call, sep=",", last="]", start=s.pos)
        if not (calls and calls[0].done):
            return calls, 0
        s.pos = end
        if text[end - 1] == "]":  # the list has closed, and so may the tag
            s.ws()
            if s.take(self.CLOSE):
                end = s.pos
        return calls, end

    def write(self, calls):
        # the template writes the arguments as they are given: an object, JSON as tojson writes it
        return (
            self.OPEN
            + "["
            + ", ".join(f'{{"name": "{n}", "arguments": {json.dumps(a, ensure_ascii=False)}}}' for n, a in calls)
            + "]"
            + self.CLOSE
        )

    def body(self, tools, parallel, lit):
        items = {"anyOf": [_call_object(t, "name", "arguments") for t in tools]}
        arr = {"type": "array", "items": items, "minItems": 1}
        if not parallel:
            arr["maxItems"] = 1
        return f"call_body: {_json_rule(arr)} {lit(self.CLOSE)}\n"


NEMOTRON = Nemotron()
