"""The XML call family:
``<tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>``
(Qwen3.5/3.6, Qwen3-Coder, Nemotron 3, StepFun; Seed-OSS with ``<seed:tool_call>``).

Parameters are typed through the tool's JSON schema: a string parameter is taken as
written, any other is JSON.
"""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _repeat, _Scan, calls_between, param_rules, params_of, text_lit
from engine.runtime.prompt.calls.partial import Partial, held, params_json, types_of

SEED_OPEN = "<seed:tool_call>"


class QwenXml(ToolFormat):
    def __init__(self, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>", label: str = "Qwen3.5/3.6 XML"):
        super().__init__("qwen-xml" if open_tag == "<tool_call>" else "seed-xml", label, open_tag, close_tag)

    def detects(self, template):
        return (
            "<function=" in template
            and "<parameter=" in template
            and ((SEED_OPEN in template) == (self.trigger == SEED_OPEN))
        )

    def partial(self, text, tools=()):
        return calls_between(text, self.trigger, self.call_end, lambda t, pos: _read(t, pos, tools))

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(
                f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                for k, v in args.items()
            )
            out.append(f"{self.trigger}\n<function={name}>\n{params}</function>\n{self.call_end}")
        return "\n".join(out)

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            parts = []
            for j, (k, sch, required) in enumerate(params_of(t)):
                rule = f"p{i}_{j}"
                rules.extend(
                    param_rules(rule, text_lit(f"<parameter={k}>\n"), sch, text_lit("\n</parameter>"), text_lit("\n"))
                )
                parts.append(rule if required else f"{rule}?")
            rules.append(
                f"f{i}: {text_lit(f'<function={t.name}>' + chr(10))} {' '.join(parts)} "
                f"{text_lit('</function>' + chr(10))}"
            )
            fns.append(f"f{i}")
        one = f'"\\n" ({" | ".join(fns)}) {lit(self.call_end)}'
        rules.append(f"one_call: {one}")
        return _repeat("one_call", f"WS {lit(self.trigger)}", parallel) + "\n".join(rules) + "\n"


def _read(text: str, pos: int, tools) -> tuple[Partial | None, int | None]:
    """``<function=NAME>`` then ``<parameter=K>\\nV\\n</parameter>`` … ``</function>``."""
    s = _Scan(text, pos)
    s.ws()
    if not s.take("<function="):
        return None, (None if "<function=".startswith(text[s.pos :]) else -1)
    name = s.until(">")
    if name is None:
        return None, None
    name = name.strip()
    types, params = types_of(tools, name), []
    while True:
        s.ws()
        if s.take("</function>"):
            return Partial(name, params_json(params, types, True)), s.pos
        if not s.take("<parameter="):
            rest = text[s.pos :]
            if "<parameter=".startswith(rest) or "</function>".startswith(rest):
                return Partial(name, params_json(params, types, False)), None
            # named, then not a parameter: the call ends here, and the rest is content
            return Partial(name, params_json(params, types, True), stop=s.pos), -1
        key = s.until(">")
        if key is None:
            return Partial(name, params_json(params, types, False)), None
        s.take("\n")
        close = text.find("</parameter>", s.pos)
        if close < 0:
            value = text[s.pos :]
            value = value[: len(value) - max(held(value, "\n</parameter>"), held(value, "</parameter>"))]
            params.append((key.strip(), value, False))
            return Partial(name, params_json(params, types, False)), None
        value = text[s.pos : close]
        params.append((key.strip(), value[:-1] if value.endswith("\n") else value, True))
        s.pos = close + len("</parameter>")


QWEN_XML = QwenXml()
SEED_XML = QwenXml(SEED_OPEN, "</seed:tool_call>", "Seed-OSS XML")
