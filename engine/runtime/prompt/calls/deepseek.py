"""The DeepSeek call family:
``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`` (V3.1),
and the same with ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```\\n`` (R1 and its distills)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import _FAIL, ToolFormat, _call, _closed, _json_rule, _Scan, text_lit

DEEPSEEK_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                    "<｜tool▁calls▁end｜>")  # fmt: skip


class DeepSeek(ToolFormat):
    BEGIN, CALL, SEP, CALL_END, END = DEEPSEEK_MARKERS
    CONTROL_MARKERS = DEEPSEEK_MARKERS

    def __init__(self, r1: bool = False):
        super().__init__("deepseek-r1" if r1 else "deepseek", "DeepSeek R1" if r1 else "DeepSeek V3.1", self.BEGIN,
                         self.CALL_END)  # fmt: skip

    @property
    def r1(self) -> bool:
        return self.name == "deepseek-r1"

    def detects(self, template):
        return self.BEGIN in template and ("```json" in template) == self.r1

    def scan(self, text, tools=()):
        s, calls, end = _Scan(text), [], 0
        s.ws()
        if not s.take(self.BEGIN):
            return [], 0
        while True:
            s.ws()
            if not s.take(self.CALL):
                break
            head = s.until(self.SEP)
            name = s.until("\n```json\n") if self.r1 else head
            if head is None or name is None:
                break
            obj = s.json()
            if self.r1 and obj is not _FAIL:
                s.ws()
                s.take("```")
            s.ws()
            c = _call(name.strip(), obj) if obj is not _FAIL else None
            if c is None or not s.take(self.CALL_END):
                break
            calls.append(c)
            end = s.pos
        s.pos = end
        s.ws()
        if calls and s.take(self.END):
            end = s.pos
        return calls, end

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
                alts.append(f'"function" {lit(self.SEP)} {text_lit(t.name + chr(10) + "```json" + chr(10))} '
                            f'{_json_rule(_closed(t.parameters))} {text_lit(chr(10) + "```")}')  # fmt: skip
            else:
                alts.append(f"{text_lit(t.name)} {lit(self.SEP)} {_json_rule(_closed(t.parameters))}")
        one = f"{lit(self.CALL)} ({' | '.join(alts)}) {lit(self.CALL_END)}"
        sep = '"\\n"' if self.r1 else ""
        return f"one_call: {one}\n" + f"call_body: one_call{f' ({sep} one_call)*' if parallel else ''} {lit(self.END)}\n"


DEEPSEEK = DeepSeek()
DEEPSEEK_R1 = DeepSeek(r1=True)
