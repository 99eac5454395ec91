"""The Kimi K2 call family: calls in a section,
``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>…<|tool_calls_section_end|>``
(Kimi K2 Instruct, K2 Thinking; Kimi K3 writes calls otherwise).

A call's id is ``functions.NAME:INDEX``, the index counting the calls of the conversation
(or of the turn); the name is read from it (a bare ``NAME`` too). Arguments are JSON.
"""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _closed, _json_rule, calls_between, name_then_json, text_lit

KIMI_MARKERS = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                "<|tool_call_end|>", "<|tool_calls_section_end|>")  # fmt: skip


def _name(call_id: str) -> str:
    """``functions.NAME:INDEX`` -> ``NAME``."""
    name = call_id.strip()
    name = name[len("functions.") :] if name.startswith("functions.") else name
    head, sep, index = name.rpartition(":")
    return head if sep and index.strip().isdigit() else name


class Kimi(ToolFormat):
    BEGIN, CALL, ARGS, CALL_END, END = KIMI_MARKERS
    CONTROL_MARKERS = KIMI_MARKERS

    def __init__(self):
        super().__init__("kimi", "Kimi K2 <|tool_call_begin|>functions.name:i", self.BEGIN, self.CALL_END)

    def detects(self, template):
        return self.BEGIN in template and self.ARGS in template

    def partial(self, text, tools=()):
        return calls_between(text, self.CALL, self.CALL_END, name_then_json(self.ARGS, _name), first=self.BEGIN,
                             last=self.END)  # fmt: skip

    def write(self, calls):
        return self.BEGIN + "".join(f"{self.CALL}functions.{n}:{i}{self.ARGS}{json.dumps(a, ensure_ascii=False)}"
                                    f"{self.CALL_END}" for i, (n, a) in enumerate(calls)) + self.END  # fmt: skip

    def body(self, tools, parallel, lit):
        alts = " | ".join(f"{text_lit(f'functions.{t.name}:')} /[0-9]{{1,3}}/ {lit(self.ARGS)} "
                          f"{_json_rule(_closed(t.parameters))}" for t in tools)  # fmt: skip
        one = f"{lit(self.CALL)} ({alts}) {lit(self.CALL_END)}"
        return f"one_call: {one}\n" + f"call_body: one_call{' one_call*' if parallel else ''} {lit(self.END)}\n"


KIMI = Kimi()
