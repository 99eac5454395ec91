"""The Hy3 call family (Tencent Hunyuan 3): GLM's arguments in Hy3's own markers, all the
calls in one ``<tool_calls:opensource>`` block::

    <tool_calls:opensource>
    <tool_call:opensource>NAME<tool_sep:opensource>
    <arg_key:opensource>K</arg_key:opensource>
    <arg_value:opensource>V</arg_value:opensource>
    </tool_call:opensource>
    </tool_calls:opensource>

A string parameter's value is taken as written, any other is JSON (:mod:`.glm`).
"""

from __future__ import annotations

import re

from engine.runtime.prompt.calls.base import ToolFormat, calls_between
from engine.runtime.prompt.calls.paramcalls.glm import ArgSyntax, arg_rules, read_arg_call, value_text

HY3_MARKERS = (
    "<tool_call:opensource>",
    "<tool_sep:opensource>",
    "<arg_key:opensource>",
    "</arg_key:opensource>",
    "<arg_value:opensource>",
    "</arg_value:opensource>",
    "</tool_calls:opensource>",
)

#: the template builds its markers as ``'<arg_key{}>'.format(':opensource')``
_RULE = re.compile(r"<arg_key(\{\}|:opensource)>")


class Hy3(ToolFormat):
    CALL, SEP, KEY, KEY_END, VALUE, VALUE_END, END = HY3_MARKERS
    CONTROL_MARKERS = HY3_MARKERS
    SYNTAX = ArgSyntax(KEY, KEY_END, VALUE, VALUE_END, "</tool_call:opensource>", SEP)

    def __init__(self):
        super().__init__("hy3", "Hy3 <tool_calls:opensource>", "<tool_calls:opensource>", "</tool_call:opensource>")

    def detects(self, template):
        return ":opensource" in template and _RULE.search(template) is not None

    def partial(self, text, tools=()):
        return calls_between(
            text,
            self.CALL,
            "",
            lambda t, pos: read_arg_call(t, pos, tools, self.SYNTAX),
            first=self.trigger,
            last=self.END,
        )

    def write(self, calls):
        out = [self.trigger + "\n"]
        for n, a in calls:
            args = "".join(
                f"{self.KEY}{k}{self.KEY_END}\n{self.VALUE}{value_text(v)}{self.VALUE_END}\n" for k, v in a.items()
            )
            out.append(f"{self.CALL}{n}{self.SEP}\n{args}{self.call_end}\n")
        return "".join(out) + self.END

    def body(self, tools, parallel, lit):
        rules, fns = arg_rules(tools, lit, self.SYNTAX)
        rules.append(f"one_call: {lit(self.CALL)} ({' | '.join(fns)})")
        many = ' ("\\n"? one_call)*' if parallel else ""
        return f'call_body: "\\n"? one_call{many} "\\n"? {lit(self.END)}\n' + "\n".join(rules) + "\n"


HY3 = Hy3()
