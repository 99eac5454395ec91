"""The Kimi call family.

K2 (Instruct, Thinking): calls in a section,
``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>…<|tool_calls_section_end|>``.
A call's id is ``functions.NAME:INDEX``, the index counting the calls of the conversation
(or of the turn); the name is read from it (a bare ``NAME`` too). Arguments are JSON.

K3: every tag is ``<|open|>TAG ATTRS<|sep|>`` … ``<|close|>TAG<|sep|>`` (attribute values
with ``&`` and ``"`` escaped as ``&amp;`` and ``&quot;``); the calls follow the reply's
response block, each argument's ``type`` saying how its value is written (``string``: as
is; ``number``, ``boolean``, ``null``, ``object``, ``array``: JSON), one call numbered
from 1 in its turn::

    <|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
    <|open|>argument key="K" type="string"<|sep|>V<|close|>argument<|sep|>…<|close|>call<|sep|>
    …<|close|>tools<|sep|>

(without the line breaks; a call's arguments may also be one JSON object,
``<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>``, which the template writes for
arguments given as a string).
"""

from __future__ import annotations

import json
import re

from engine.runtime.prompt.calls.base import ToolFormat, _closed, _json_rule, _Scan, bad_json_at, calls_between
from engine.runtime.prompt.calls.base import json_args, name_then_json, text_lit, upto
from engine.runtime.prompt.calls.paramcalls.dsml import attrs
from engine.runtime.prompt.calls.partial import Partial, held, is_string, params_json, types_of

KIMI_MARKERS = (
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
)


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
        return calls_between(
            text, self.CALL, self.CALL_END, name_then_json(self.ARGS, _name), first=self.BEGIN, last=self.END
        )

    def write(self, calls):
        return (
            self.BEGIN
            + "".join(
                f"{self.CALL}functions.{n}:{i}{self.ARGS}{json.dumps(a, ensure_ascii=False)}{self.CALL_END}"
                for i, (n, a) in enumerate(calls)
            )
            + self.END
        )

    def body(self, tools, parallel, lit):
        alts = " | ".join(
            f"{text_lit(f'functions.{t.name}:')} /[0-9]{{1,3}}/ {lit(self.ARGS)} {_json_rule(_closed(t.parameters))}"
            for t in tools
        )
        one = f"{lit(self.CALL)} ({alts}) {lit(self.CALL_END)}"
        return f"one_call: {one}\n" + f"call_body: one_call{' one_call*' if parallel else ''} {lit(self.END)}\n"


KIMI = Kimi()


# ------------------------------------------------------------------------------ K3
OPEN, SEP, CLOSE = "<|open|>", "<|sep|>", "<|close|>"
K3_TOOLS, K3_TOOLS_END = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
K3_CALL, K3_CALL_END = f"{OPEN}call", f"{CLOSE}call{SEP}"
K3_ARG, K3_ARG_END = f"{OPEN}argument", f"{CLOSE}argument{SEP}"
K3_JSON, K3_JSON_END = f"{OPEN}json", f"{CLOSE}json{SEP}"
K3_RESPONSE, K3_RESPONSE_END, K3_MESSAGE_END = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}", f"{CLOSE}message{SEP}"
#: the ``type`` of a value written as JSON (``string``: as written)
_JSON_TYPES = ("number", "boolean", "null", "object", "array")
#: a tag's attributes, whole and as far as they are written
_HEAD = re.compile(r'(?:\s+[\w-]+="[^"]*")*\s*')
_HEAD_SO_FAR = re.compile(r'(?:\s+[\w-]+="[^"]*")*(?:\s+(?:[\w-]+(?:=(?:"[^"]*)?)?)?)?')
#: a JSON schema type's ``type`` (a string's is ``string``, and is not JSON)
_K3_TYPE = {
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
    "object": "object",
    "array": "array",
}


def _attr(value: str) -> str:
    """An attribute's value as the template quotes it."""
    return '"' + value.replace("&", "&amp;").replace('"', "&quot;") + '"'


def _unattr(value: str) -> str:
    return value.replace("&quot;", '"').replace("&amp;", "&")


def _k3_type(value) -> str:
    """The ``type`` the template gives a value."""
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "object" if isinstance(value, dict) else "array"


def _k3_json_types(schema) -> list[str]:
    """The ``type`` s a value of ``schema`` written as JSON may be given."""
    sch = schema if isinstance(schema, dict) else {}
    t = sch.get("type")
    if isinstance(t, str | list):
        kinds = [_K3_TYPE.get(n) for n in ([t] if isinstance(t, str) else t) if isinstance(n, str)]
    elif isinstance(sch.get("enum"), list):
        kinds = [_k3_type(x) for x in sch["enum"]]
    else:
        kinds = ["object"] if "properties" in sch else ["array"] if "items" in sch else []
    return [k for k in dict.fromkeys(kinds) if k in _JSON_TYPES] or list(_JSON_TYPES)


def _marker_at(text: str, pos: int) -> int:
    """Where the next tag marker (``<|open|>`` or ``<|close|>``) at or after ``pos`` begins (-1: none)."""
    found = [i for i in (text.find(OPEN, pos), text.find(CLOSE, pos)) if i >= 0]
    return min(found) if found else -1


def _k3_head(text: str, pos: int) -> tuple[dict[str, str] | None, int | None]:
    """A tag's attributes at ``text[pos]`` (just past its name) up to and with ``<|sep|>``,
    and where they end (None: not written yet; -1: not a tag's attributes)."""
    i = text.find(SEP, pos)
    if i < 0:
        head = text[pos:]
        head = head[: len(head) - held(head, SEP)]
        return None, (None if _HEAD_SO_FAR.fullmatch(head) and _marker_at(head, 0) < 0 else -1)
    head = text[pos:i]
    if not _HEAD.fullmatch(head) or _marker_at(head, 0) >= 0:
        return None, -1
    return {k: _unattr(v) for k, v in attrs(head).items()}, i + len(SEP)


def _read_k3(text: str, pos: int, tools) -> tuple[Partial | None, int | None]:
    """`` tool="NAME" index="I"<|sep|>`` then arguments, each
    ``<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>`` (or one
    ``<|open|>json …<|sep|>{...}<|close|>json<|sep|>``), up to and with ``<|close|>call<|sep|>``.
    The call is reported once its head is whole; a string value streams as written, any
    other is sent when its argument closes. Text that cannot continue the call closes it
    (``Partial.stop``): a string value cut by a marker that is not its end ends there."""
    head, at = _k3_head(text, pos)
    if head is None or at is None or at < 0:
        return None, at
    name = head.get("tool", "").strip()
    if not name:
        return None, -1
    schemas, types, params = types_of(tools, name), {}, []
    s = _Scan(text, at)
    while True:
        s.ws()
        mark = s.pos  # where text that is not part of the call would begin
        if s.take(K3_CALL_END):
            return Partial(name, params_json(params, types, True)), s.pos
        so_far = Partial(name, params_json(params, types, False))
        if not params and s.take(K3_JSON):
            return _read_k3_json(text, s.pos, name, mark)
        if not s.take(K3_ARG):
            rest = text[s.pos :]
            if any(m.startswith(rest) for m in (K3_CALL_END, K3_ARG, K3_JSON)):
                return so_far, None
            return Partial(name, params_json(params, types, True), stop=mark), -1
        arg, v = _k3_head(text, s.pos)
        if v is None:
            return so_far, None
        if arg is None or v < 0 or "key" not in arg:
            return Partial(name, params_json(params, types, True), stop=mark), -1
        key, kind = arg["key"], arg.get("type")
        # the value's own type says how it is written; without one, the tool's schema does
        types[key] = {"type": "string"} if kind == "string" else {} if kind else schemas.get(key)
        end = _marker_at(text, v)
        if end < 0 or (K3_ARG_END.startswith(text[end:]) and end + len(K3_ARG_END) > len(text)):
            raw = text[v:] if end < 0 else text[v:end]
            raw = raw[: len(raw) - max(held(raw, OPEN), held(raw, CLOSE))] if end < 0 else raw
            params.append((key, raw, False))
            return Partial(name, params_json(params, types, False)), None
        params.append((key, text[v:end], True))
        if not text.startswith(K3_ARG_END, end):  # a marker that is not the value's end: the value ends there
            return Partial(name, params_json(params, types, True), stop=end), -1
        s.pos = end + len(K3_ARG_END)


def _read_k3_json(text: str, pos: int, name: str, mark: int) -> tuple[Partial | None, int | None]:
    """A call's arguments as one JSON object: `` type="object"<|sep|>{...}<|close|>json<|sep|>``
    then ``<|close|>call<|sep|>`` (``mark``: where the block began)."""
    head, at = _k3_head(text, pos)
    if at is None:
        return Partial(name, "{"), None
    if head is None or at < 0:
        return Partial(name, "{}", stop=mark), -1
    args, end = json_args(text, at)
    if end is None:
        return Partial(name, args or "{"), None
    if end < 0:
        return Partial(name, args or "{", stop=bad_json_at(text, at)), -1
    s = _Scan(text, end)
    for m in (K3_JSON_END, K3_CALL_END):
        s.ws()
        if not s.take(m):
            rest = text[s.pos :]
            return (Partial(name, args), None) if m.startswith(rest) else (Partial(name, args, stop=s.pos), -1)
    return Partial(name, args), s.pos


class KimiK3(ToolFormat):
    """K3: ``<|close|>response<|sep|><|open|>tools<|sep|>``, ``<|open|>call tool=…<|sep|>``,
    ``<|open|>argument key=… type=…<|sep|>V<|close|>argument<|sep|>`` … ``<|close|>tools<|sep|>``."""

    CONTROL_MARKERS = (
        K3_TOOLS,
        K3_TOOLS_END,
        K3_CALL,
        K3_CALL_END,
        K3_ARG,
        K3_ARG_END,
        K3_JSON,
        K3_JSON_END,
        K3_RESPONSE,
        K3_RESPONSE_END,
        K3_MESSAGE_END,
    )

    def __init__(self):
        # the calls open as the template writes them, past the response block's end (which
        # the grammar then writes too); a reply that skips it is read as well
        super().__init__("kimi-k3", "Kimi K3 <|open|>call tool=…", K3_RESPONSE_END + K3_TOOLS, K3_CALL_END)

    def detects(self, template):
        # the template builds its tags from '<|open|>' + tag and '<|close|>' + tag + '<|sep|>'
        return all(m in template for m in (OPEN, SEP, CLOSE)) and "argument" in template

    @property
    def openers(self):
        return (K3_TOOLS, K3_RESPONSE_END + K3_TOOLS)

    def find(self, text):
        """Where the calls start: at ``<|open|>tools<|sep|>``, or at the end of the response
        block right before it (the end marker is the calls', not content)."""
        i = text.find(K3_TOOLS)
        if i < 0:
            return -1
        j = text.rfind(K3_RESPONSE_END, 0, i)
        return j if j >= 0 and not text[j + len(K3_RESPONSE_END) : i].strip() else i

    def partial(self, text, tools=()):
        start = len(K3_RESPONSE_END) if text.startswith(K3_RESPONSE_END) else 0
        read = lambda t, pos: _read_k3(t, pos, tools)  # noqa: E731
        calls, end = calls_between(text, K3_CALL, "", read, first=K3_TOOLS, last=K3_TOOLS_END, start=start)
        if end and text[:end].endswith(K3_TOOLS_END):  # the message's end, when it follows, is the calls' too
            s = _Scan(text, end)
            s.ws()
            end = s.pos if s.take(K3_MESSAGE_END) else end
        return calls, end

    def write(self, calls):
        out = []
        for i, (name, args) in enumerate(calls):
            params = "".join(
                f"{K3_ARG} key={_attr(k)} type={_attr(_k3_type(v))}{SEP}"
                f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}{K3_ARG_END}"
                for k, v in args.items()
            )
            out.append(f"{K3_CALL} tool={_attr(name)} index={_attr(str(i + 1))}{SEP}{params}{K3_CALL_END}")
        return self.trigger + "".join(out) + K3_TOOLS_END

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            props = t.parameters.get("properties", {}) or {}
            required = set(t.parameters.get("required", []) or [])
            parts = []
            for j, (k, sch) in enumerate(props.items()):
                rule, string = f"p{i}_{j}", is_string(sch)
                kinds = ["string"] if string else _k3_json_types(sch)
                head = (
                    f"{lit(K3_ARG)} {text_lit(f' key={_attr(k)} type=')} "
                    f"({' | '.join(text_lit(_attr(x)) for x in kinds)}) {lit(SEP)}"
                )
                if string and "enum" in sch:
                    rules.append(f"{rule}: {head} ({' | '.join(text_lit(v) for v in sch['enum'])}) {lit(K3_ARG_END)}")
                elif string:
                    rules.extend(upto(f"{rule}_v", lit(K3_ARG_END), sch.get("maxLength")))
                    rules.append(f"{rule}: {head} {rule}_v")
                else:
                    rules.append(f"{rule}: {head} {_json_rule(sch if isinstance(sch, dict) else {})} {lit(K3_ARG_END)}")
                parts.append(rule if k in required else f"{rule}?")
            call = text_lit(f" tool={_attr(t.name)} index=")
            rules.append(
                f'f{i}: {lit(K3_CALL)} {call} /"[1-9][0-9]{{0,2}}"/ {lit(SEP)} {" ".join(parts)} {lit(K3_CALL_END)}'
            )
            fns.append(f"f{i}")
        rules.append(f"one_call: {' | '.join(fns)}")
        many = " one_call*" if parallel else ""
        return f"call_body: one_call{many} {lit(K3_TOOLS_END)} ({lit(K3_MESSAGE_END)})?\n" + "\n".join(rules) + "\n"


KIMI_K3 = KimiK3()
