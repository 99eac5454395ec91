"""The DeepSeek call family:
``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`` (V3.1),
and the same with ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```\\n`` (R1 and its distills)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import (
    ToolFormat,
    _closed,
    _json_rule,
    _Scan,
    calls_between,
    json_args,
    name_then_json,
    text_lit,
)
from engine.runtime.prompt.calls.partial import Partial

DEEPSEEK_MARKERS = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
)


class DeepSeek(ToolFormat):
    BEGIN, CALL, SEP, CALL_END, END = DEEPSEEK_MARKERS
    CONTROL_MARKERS = DEEPSEEK_MARKERS

    def __init__(self, r1: bool = False):
        super().__init__(
            "deepseek-r1" if r1 else "deepseek", "DeepSeek R1" if r1 else "DeepSeek V3.1", self.BEGIN, self.CALL_END
        )

    @property
    def r1(self) -> bool:
        return self.name == "deepseek-r1"

    def detects(self, template):
        return self.BEGIN in template and ("```json" in template) == self.r1

    def partial(self, text, tools=()):
        read = self._read_r1 if self.r1 else name_then_json(self.SEP)
        return calls_between(text, self.CALL, self.CALL_END, read, first=self.BEGIN, last=self.END)

    def _read_r1(self, text, pos):
        """``function<｜tool▁sep｜>NAME\n```json\n{...}\n```"""
        fence = "\n```json\n"
        i, j = text.find(self.SEP, pos), text.find(fence, pos)
        if i < 0 or j < 0:
            return None, None
        name = text[i + len(self.SEP) : j].strip()
        if not name:
            return None, -1
        args, end = json_args(text, j + len(fence))
        if end is None or end < 0:
            return Partial(name, args), end
        s = _Scan(text, end)
        s.ws()
        if "```".startswith(text[s.pos : s.pos + 3]) and len(text) - s.pos < 3:
            return Partial(name, args), None
        return (Partial(name, args), s.pos) if s.take("```") else (None, -1)

    def write(self, calls):
        parts = []
        for n, a in calls:
            if self.r1:
                parts.append(f"{self.CALL}function{self.SEP}{n}\n```json\n{json.dumps(a)}\n```{self.CALL_END}")
            else:
                parts.append(f"{self.CALL}{n}{self.SEP}{json.dumps(a)}{self.CALL_END}")
        return self.BEGIN + ("\n" if self.r1 else "").join(parts) + self.END

    def body(self, tools, parallel, lit):
        alts = []
        for t in tools:
            if self.r1:
                alts.append(
                    f'"function" {lit(self.SEP)} {text_lit(t.name + chr(10) + "```json" + chr(10))} '
                    f"{_json_rule(_closed(t.parameters))} {text_lit(chr(10) + '```')}"
                )
            else:
                alts.append(f"{text_lit(t.name)} {lit(self.SEP)} {_json_rule(_closed(t.parameters))}")
        one = f"{lit(self.CALL)} ({' | '.join(alts)}) {lit(self.CALL_END)}"
        sep = '"\\n"' if self.r1 else ""
        return (
            f"one_call: {one}\n" + f"call_body: one_call{f' ({sep} one_call)*' if parallel else ''} {lit(self.END)}\n"
        )


DEEPSEEK = DeepSeek()
DEEPSEEK_R1 = DeepSeek(r1=True)
