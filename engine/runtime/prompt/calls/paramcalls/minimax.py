"""The MiniMax call family.

M2 (and M2.1/M2.5), parameters as XML whose values are text, typed through the tool's
schema (a string parameter as written, any other JSON), values trimmed of surrounding
whitespace as MiniMax's own parser does::

    <minimax:tool_call>
    <invoke name="NAME">
    <parameter name="K">V</parameter>
    </invoke>
    </minimax:tool_call>

M3, each tag after the marker ``]<]minimax[>[`` (NS below), a parameter as an element
named by its key and a nested value spelled out as elements (an object's keys; a list's
``<item>`` s)::

    NS<tool_call>
    NS<invoke name="NAME">NS<K>VNS</K>NS<L>NS<item>1NS</item>NS</L>NS</invoke>
    NS</tool_call>

M1, one JSON object a line in one block (the template writes the arguments with
``tojson``: they must be a mapping)::

    <tool_calls>
    {"name": "NAME", "arguments": {...}}
    </tool_calls>
"""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _closed, _json_rule, _Scan, calls_between, text_lit
from engine.runtime.prompt.calls.base import param_rules, params_of, upto, wrapped_call
from engine.runtime.prompt.calls.paramcalls.dsml import attrs, read_invoke
from engine.runtime.prompt.calls.partial import Partial, held, is_string, params_json, typed, types_of

OPEN, CLOSE = "<minimax:tool_call>", "</minimax:tool_call>"
INVOKE, INVOKE_END, PARAM, PARAM_END = "<invoke", "</invoke>", "<parameter", "</parameter>"
NS = "]<]minimax[>["
M3_OPEN, M3_CLOSE, M3_INVOKE, M3_INVOKE_END = f"{NS}<tool_call>", f"{NS}</tool_call>", f"{NS}<invoke", f"{NS}</invoke>"
M1_OPEN, M1_CLOSE = "<tool_calls>", "</tool_calls>"
#: how deep the M3 grammar spells out a nested schema (deeper: free text)
_DEPTH = 6


class MiniMax(ToolFormat):
    """M2: ``<minimax:tool_call>`` … ``<invoke name=…><parameter name=…>V</parameter></invoke>``."""

    CONTROL_MARKERS = (CLOSE,)

    def __init__(self):
        super().__init__("minimax", "MiniMax M2 XML", OPEN, INVOKE_END)

    def detects(self, template):
        return OPEN in template and INVOKE in template

    def partial(self, text, tools=()):
        read = lambda t, pos: read_invoke(t, pos, tools, PARAM, PARAM_END, INVOKE_END, strip=True)  # noqa: E731
        return calls_between(text, INVOKE, "", read, first=OPEN, last=CLOSE)

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(
                f'{PARAM} name="{k}">{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}{PARAM_END}\n'
                for k, v in args.items()
            )
            out.append(f'{INVOKE} name="{name}">\n{params}{INVOKE_END}\n')
        return f"{OPEN}\n{''.join(out)}{CLOSE}"

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            parts = []
            for j, (k, sch, required) in enumerate(params_of(t)):
                rule = f"p{i}_{j}"
                head = f"{lit(PARAM)} {text_lit(f' name={json.dumps(k, ensure_ascii=False)}>')}"
                rules.extend(param_rules(rule, head, sch, lit(PARAM_END), '"\\n"'))
                parts.append(rule if required else f"{rule}?")
            name = text_lit(f" name={json.dumps(t.name, ensure_ascii=False)}>\n")
            rules.append(f"f{i}: {lit(INVOKE)} {name} {' '.join(parts)} {lit(INVOKE_END)}")
            fns.append(f"f{i}")
        rules.append(f"one_call: {' | '.join(fns)}")
        many = ' ("\\n" one_call)*' if parallel else ""
        return f'call_body: "\\n" one_call{many} "\\n" {lit(CLOSE)}\n' + "\n".join(rules) + "\n"


class MiniMaxM3(ToolFormat):
    """M3: ``NS<tool_call>`` … ``NS<invoke name=…>NS<K>V NS</K>NS</invoke>``, nested values as elements."""

    CONTROL_MARKERS = (NS, M3_CLOSE)

    def __init__(self):
        super().__init__("minimax-m3", "MiniMax M3 XML", M3_OPEN, M3_INVOKE_END)

    def detects(self, template):
        return NS in template and INVOKE in template

    def partial(self, text, tools=()):
        return calls_between(text, M3_INVOKE, "", lambda t, pos: _read_m3(t, pos, tools), first=M3_OPEN, last=M3_CLOSE)

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(f"{NS}<{k}>{_xml(v)}{NS}</{k}>" for k, v in args.items() if v is not None)
            out.append(f'{M3_INVOKE} name="{name}">{params}{M3_INVOKE_END}\n')
        return f"{M3_OPEN}\n{''.join(out)}{M3_CLOSE}"

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            props = t.parameters.get("properties", {}) or {}
            required = set(t.parameters.get("required", []) or [])
            parts = []
            for j, (k, sch) in enumerate(props.items()):
                _element_rule(f"p{i}_{j}", k, sch, lit, rules, 0)
                parts.append(f"p{i}_{j}" if k in required else f"p{i}_{j}?")
            name = text_lit(f" name={json.dumps(t.name, ensure_ascii=False)}>")
            rules.append(f"f{i}: {lit(M3_INVOKE)} {name} {' '.join(parts)} {lit(M3_INVOKE_END)}")
            fns.append(f"f{i}")
        rules.append(f"one_call: {' | '.join(fns)}")
        many = ' ("\\n" one_call)*' if parallel else ""
        return f'call_body: "\\n" one_call{many} "\\n" {lit(M3_CLOSE)}\n' + "\n".join(rules) + "\n"


class MiniMaxM1(ToolFormat):
    """M1: ``<tool_calls>`` then ``{"name": …, "arguments": {…}}`` a line … ``</tool_calls>``."""

    CONTROL_MARKERS = (M1_CLOSE,)

    def __init__(self):
        super().__init__("minimax-m1", "MiniMax M1 JSON lines in <tool_calls>", M1_OPEN, "}")

    def detects(self, template):
        # Apriel writes a JSON list (or YAML) in <tool_calls>, and says so as <tool_calls>[
        return (
            M1_OPEN in template
            and M1_CLOSE in template
            and '"arguments"' in template
            and not any(m in template for m in ("<tool_calls>[", INVOKE))
        )

    def partial(self, text, tools=()):
        return calls_between(text, "", "", wrapped_call, first=M1_OPEN, last=M1_CLOSE)

    def write(self, calls):
        lines = "".join(f'{{"name": "{n}", "arguments": {json.dumps(a, ensure_ascii=False)}}}\n' for n, a in calls)
        return f"{M1_OPEN}\n{lines}{M1_CLOSE}"

    def body(self, tools, parallel, lit):
        # as the template spaces it: '{"name": "NAME", "arguments": ' then the arguments' JSON
        heads = [text_lit('{"name": "%s", "arguments": ' % t.name) for t in tools]
        one = " | ".join(f'{h} {_json_rule(_closed(t.parameters))} "}}"' for h, t in zip(heads, tools, strict=True))
        many = ' ("\\n" one_call)*' if parallel else ""
        return f"one_call: {one}\n" + f'call_body: "\\n" one_call{many} "\\n" {lit(M1_CLOSE)}\n'


def _xml(v) -> str:
    """A value as the M3 template writes it: mappings and lists as elements, booleans as
    JSON, anything else as text."""
    if isinstance(v, dict):
        return "".join(f"{NS}<{k}>{_xml(x)}{NS}</{k}>" for k, x in v.items() if x is not None)
    if isinstance(v, list):
        return "".join(f"{NS}<item>{_xml(x)}{NS}</item>" for x in v)
    if isinstance(v, bool):
        return json.dumps(v)
    return "" if v is None else str(v)


def _type(schema) -> str | None:
    """Whether a schema's values are an "object", an "array" (else None: a scalar, or unknown)."""
    if not isinstance(schema, dict):
        return None
    t = schema.get("type")
    if isinstance(t, list):
        return next((x for x in ("object", "array") if x in t), None)
    if t is None:
        return "object" if "properties" in schema else "array" if "items" in schema else None
    return t if t in ("object", "array") else None


def _element_rule(rule: str, tag: str, schema, lit, rules: list[str], depth: int) -> None:
    """Rules for element ``tag`` (``NS<tag>`` value ``NS</tag>``) holding a value of ``schema``."""
    open_, close = lit(f"{NS}<{tag}>"), lit(f"{NS}</{tag}>")
    sch = schema if isinstance(schema, dict) else {}
    kind = _type(sch)
    if is_string(sch) and "enum" in sch:
        rules.append(f"{rule}: {open_} ({' | '.join(text_lit(v) for v in sch['enum'])}) {close}")
    elif kind == "object" and isinstance(sch.get("properties"), dict) and sch["properties"] and depth < _DEPTH:
        required = set(sch.get("required", []) or [])
        parts = []
        for j, (k, s) in enumerate(sch["properties"].items()):
            _element_rule(f"{rule}_{j}", k, s, lit, rules, depth + 1)
            parts.append(f"{rule}_{j}" if k in required else f"{rule}_{j}?")
        rules.append(f"{rule}: {open_} {' '.join(parts)} {close}")
    elif kind == "array" and isinstance(sch.get("items"), dict) and depth < _DEPTH:
        _element_rule(f"{rule}_i", "item", sch["items"], lit, rules, depth + 1)
        rules.append(f"{rule}: {open_} {rule}_i{'+' if sch.get('minItems', 0) else '*'} {close}")
    elif (
        kind is None
        and sch.get("type") in ("integer", "number", "boolean", "null")
        or ("enum" in sch and not is_string(sch))
    ):
        rules.append(f"{rule}: {open_} {_json_rule(sch)} {close}")
    else:  # text (a string, or a value the schema does not spell out)
        rules.extend(upto(f"{rule}_v", close, sch.get("maxLength")))
        rules.append(f"{rule}: {open_} {rule}_v")


def _scalar(raw: str, schema) -> object:
    kind = _type(schema)
    if raw == "" and kind is not None:
        return [] if kind == "array" else {}
    return typed(raw, schema)


def _element(text: str, pos: int, tag: str, schema) -> tuple[object, int | None]:
    """The value of M3 element ``tag`` whose content starts at ``text[pos]``, and where its
    closing tag ends (None: not written yet; -1: not well formed)."""
    close = f"{NS}</{tag}>"
    s = _Scan(text, pos)
    s.ws()
    if text.startswith(f"{NS}<", s.pos) and not text.startswith(close, s.pos):  # elements
        kids: list[tuple[str, object]] = []
        kind = _type(schema)
        while True:
            s.ws()
            if s.take(close):
                break
            rest = text[s.pos :]
            if not s.take(f"{NS}<"):
                return None, None if f"{NS}<".startswith(rest) else -1
            name = s.until(">")
            if name is None:
                return None, None
            if name.startswith("/"):
                return None, -1
            props = schema.get("properties", {}) if isinstance(schema, dict) else {}
            child = (
                (schema.get("items") if kind == "array" else props.get(name) if isinstance(props, dict) else None)
                if isinstance(schema, dict)
                else None
            )
            value, end = _element(text, s.pos, name, child)
            if end is None or end < 0:
                return None, end
            kids.append((name, value))
            s.pos = end
        if kind == "array" or (kind is None and kids and all(n == "item" for n, _ in kids)):
            return [v for _, v in kids], s.pos
        return dict(kids), s.pos
    i = text.find(NS, pos)
    if i < 0:
        return None, None
    if not text.startswith(close, i):
        return None, None if close.startswith(text[i:]) else -1
    return _scalar(text[pos:i], schema), i + len(close)


def _read_m3(text: str, pos: int, tools) -> tuple[Partial | None, int | None]:
    """`` name="NAME">`` then ``NS<K>V NS</K>`` … up to and with ``NS</invoke>``. A string
    value streams as written; any other (or a nested one) is sent when its element
    closes. As in :func:`.dsml.read_invoke`, the call is reported once a parameter or the
    closer follows its name, and text that cannot continue it closes it (it is then
    content)."""
    s = _Scan(text, pos)
    head = s.until(">")
    if head is None:
        return None, None
    name = attrs(head).get("name", "").strip()
    s.ws()
    rest = text[s.pos :]
    if not name or not rest.startswith(f"{NS}<"):
        return None, (None if name and f"{NS}<".startswith(rest) else -1)
    types, params = dict(types_of(tools, name)), []
    while True:
        s.ws()
        mark = s.pos  # where text that is not part of the call would begin
        if s.take(M3_INVOKE_END):
            return Partial(name, params_json(params, types, True)), s.pos
        so_far = Partial(name, params_json(params, types, False))
        if not s.take(f"{NS}<"):
            rest = text[s.pos :]
            if f"{NS}<".startswith(rest):
                return so_far, None
            return Partial(name, params_json(params, types, True)), mark
        key = s.until(">")
        if key is None:
            return so_far, None
        if key.startswith("/") or not key.strip():
            return Partial(name, params_json(params, types, True)), mark
        schema = types.get(key)
        value, end = _element(text, s.pos, key, schema)
        if end is not None and end >= 0:
            if is_string(schema) and isinstance(value, str):
                params.append((key, value, True))
            else:  # sent as JSON when whole
                types[key] = {}
                params.append((key, json.dumps(value, ensure_ascii=False), True))
            s.pos = end
            continue
        raw = ""
        if is_string(schema):  # text so far, up to the next marker (a nested value never streams)
            raw = text[s.pos :]
            i = raw.find(NS)
            raw = raw[:i] if i >= 0 else raw[: len(raw) - held(raw, NS)]
        if end is None:
            if raw.strip():
                params.append((key, raw, False))
                return Partial(name, params_json(params, types, False)), None
            return so_far, None
        if raw.strip():  # text sent, then a marker that is not its end: the value ends there
            params.append((key, raw, True))
            return Partial(name, params_json(params, types, True)), s.pos + len(raw)
        return Partial(name, params_json(params, types, True)), mark


MINIMAX = MiniMax()
MINIMAX_M3 = MiniMaxM3()
MINIMAX_M1 = MiniMaxM1()
