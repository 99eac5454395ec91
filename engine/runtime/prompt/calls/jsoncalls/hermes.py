"""The Hermes call family: ``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>``
(Qwen2.5/3, QwQ, Hermes, Granite 4 …)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _call_object, _json_rule, _repeat, calls_between, wrapped_call


class Hermes(ToolFormat):
    def __init__(self):
        super().__init__("hermes", "Hermes JSON in <tool_call>", "<tool_call>", "</tool_call>")

    def detects(self, template):
        # GLM's <arg_key>, MiniMax's <invoke> and Apriel's <tool_calls> come with <tool_call>
        # and "arguments" too, but are not Hermes JSON
        return (
            "<tool_call>" in template
            and "arguments" in template
            and not any(m in template for m in ("<arg_key>", "<invoke", "<tool_calls>"))
        )

    def partial(self, text, tools=()):
        return calls_between(text, "<tool_call>", "</tool_call>", wrapped_call)

    def write(self, calls):
        return "\n".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(_json_rule(_call_object(t, "name", "arguments")) for t in tools)
        one = f'"\\n" ({alts}) "\\n" {lit("</tool_call>")}'
        return f"one_call: {one}\n" + _repeat("one_call", f"WS {lit('<tool_call>')}", parallel)


HERMES = Hermes()
