"""The XML call family: ``<tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>``
(Qwen3.5/3.6, Qwen3-Coder, Nemotron 3, StepFun; Seed-OSS with ``<seed:tool_call>``).

Parameters are typed through the tool's JSON schema: a string parameter is taken as
written, any other is JSON.
"""

from __future__ import annotations

import json
import re

from engine.runtime.prompt.calls.base import ToolFormat, _json_rule, _repeat, _Scan, text_lit
from engine.runtime.prompt.tools import ToolCall

SEED_OPEN = "<seed:tool_call>"


class QwenXml(ToolFormat):
    def __init__(self, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>", label: str = "Qwen3.5/3.6 XML"):
        super().__init__("qwen-xml" if open_tag == "<tool_call>" else "seed-xml", label, open_tag, close_tag)

    def detects(self, template):
        return "<function=" in template and "<parameter=" in template and (
            (SEED_OPEN in template) == (self.trigger == SEED_OPEN))  # fmt: skip

    def scan(self, text, tools=()):
        types = {t.name: t.parameters.get("properties", {}) for t in tools}
        s, calls, end = _Scan(text), [], 0
        while True:
            s.ws()
            if not s.take(self.trigger):
                break
            s.ws()
            if not s.take("<function="):
                break
            name = s.until(">")
            body = s.until("</function>") if name is not None else None
            if body is None:
                break
            s.ws()
            if not s.take(self.call_end):
                break
            args = {}
            for m in re.finditer(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", body, re.S):
                args[m.group(1).strip()] = _typed(m.group(2), types.get(name.strip(), {}).get(m.group(1).strip()))
            calls.append(ToolCall(name.strip(), json.dumps(args, ensure_ascii=False)))
            end = s.pos
        return calls, end

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                             for k, v in args.items())  # fmt: skip
            out.append(f"{self.trigger}\n<function={name}>\n{params}</function>\n{self.call_end}")
        return "\n".join(out)

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            props = t.parameters.get("properties", {}) or {}
            required = set(t.parameters.get("required", []) or [])
            parts = []
            for j, (k, sch) in enumerate(props.items()):
                rule = f"p{i}_{j}"
                head = text_lit(f"<parameter={k}>\n")
                if _is_string(sch) and "enum" in sch:
                    values = " | ".join(text_lit(v) for v in sch["enum"])
                    rules.append(f"{rule}: {head} ({values}) {text_lit(chr(10) + '</parameter>' + chr(10))}")
                elif _is_string(sch):
                    most = sch.get("maxLength")
                    body = f"/(?s:.){{0,{int(most)}}}/" if isinstance(most, int) else "/(?s:.*)/"
                    rules.append(f"{rule}_v[lazy]: {body} {text_lit(chr(10) + '</parameter>')}")
                    rules.append(f"{rule}: {head} {rule}_v {text_lit(chr(10))}")
                else:
                    rules.append(f"{rule}: {head} {_json_rule(sch if isinstance(sch, dict) else {})} "
                                 f"{text_lit(chr(10) + '</parameter>' + chr(10))}")  # fmt: skip
                parts.append(rule if k in required else f"{rule}?")
            rules.append(f"f{i}: {text_lit(f'<function={t.name}>' + chr(10))} {' '.join(parts)} "
                         f"{text_lit('</function>' + chr(10))}")  # fmt: skip
            fns.append(f"f{i}")
        one = f'"\\n" ({" | ".join(fns)}) {lit(self.call_end)}'
        rules.append(f"one_call: {one}")
        return _repeat("one_call", f"WS {lit(self.trigger)}", parallel) + "\n".join(rules) + "\n"


def _is_string(schema) -> bool:
    if not isinstance(schema, dict):
        return False
    t = schema.get("type")
    return t == "string" or (isinstance(t, list) and t == ["string"]) or ("enum" in schema and all(
        isinstance(v, str) for v in schema["enum"]) and "type" not in schema)  # fmt: skip


def _typed(raw: str, schema) -> object:
    if _is_string(schema):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


QWEN_XML = QwenXml()
SEED_XML = QwenXml(SEED_OPEN, "</seed:tool_call>", "Seed-OSS XML")
