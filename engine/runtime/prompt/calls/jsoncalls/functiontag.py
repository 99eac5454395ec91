"""The function-tag call family: ``<function=NAME>{...}</function>`` (Functionary v3.1)."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import (
    ToolFormat,
    _closed,
    _json_rule,
    _repeat,
    calls_between,
    name_then_json,
    text_lit,
)


class FunctionTag(ToolFormat):
    """``<function=NAME>{...}</function>`` (Functionary v3.1)."""

    def __init__(self):
        super().__init__("function-tag", "Functionary <function=name>{json}</function>", "<function=", "</function>")

    def detects(self, template):
        # with <parameter= it is the XML family
        return "<function=" in template and "<parameter=" not in template

    def partial(self, text, tools=()):
        return calls_between(text, "<function=", "</function>", name_then_json(">"))

    def write(self, calls):
        return "".join(f"<function={n}>{json.dumps(a)}</function>" for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(f"{text_lit(t.name + '>')} {_json_rule(_closed(t.parameters))}" for t in tools)
        return f'one_call: ({alts}) "</function>"\n' + _repeat("one_call", '"<function="', parallel)


FUNCTION_TAG = FunctionTag()
