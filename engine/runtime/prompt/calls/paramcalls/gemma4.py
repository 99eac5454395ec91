"""The Gemma 4 call family: ``<|tool_call>call:NAME{city:<|"|>Paris<|"|>,days:3}<tool_call|>``,
one call after another with nothing between them, the last followed by ``<|tool_response>``.

Arguments are Gemma's own object syntax: keys bare, strings between ``<|"|>`` markers
(written as they are, no escapes), numbers and ``true``/``false`` bare, objects and lists
nested in the same style. They are converted to JSON text as they are written: a string
streams character by character, anything else is sent when whole. A bare value of a
string parameter (``unit:celsius``) is that text; keys and strings written as JSON
(``"k":"v"``) are read too.
"""

from __future__ import annotations

import json
import math
import re

from engine.runtime.prompt.calls.base import ToolFormat, _closed, _json_rule, _repeat, _Scan, calls_between, text_lit
from engine.runtime.prompt.calls.partial import Partial, held, is_string, json_prefix, types_of

#: Gemma's string quote (a special token in its vocabulary)
QUOTE = '<|"|>'
#: what follows the calls (the template writes it after an assistant's calls)
RESPONSE = "<|tool_response>"

_NAME = re.compile(r"[^\s<>{}\"']*")
_KEY = re.compile(r"[^\s:{}\[\],<>\"]*")
_BARE = re.compile(r"[^,{}\[\]<\"]*")
_JSON_STR = re.compile(r'"(?:[^"\\]|\\.)*"')
_WS = re.compile(r"\s*")


class Gemma4(ToolFormat):
    CONTROL_MARKERS = (QUOTE, RESPONSE)

    def __init__(self):
        super().__init__("gemma4", "Gemma 4 <|tool_call>call:name{...}", "<|tool_call>", "<tool_call|>")

    def detects(self, template):
        return "<|tool_call>call:" in template

    def partial(self, text, tools=()):
        return calls_between(text, self.trigger, self.call_end, lambda t, pos: _read(t, pos, tools), last=RESPONSE)

    def write(self, calls):
        # as the template writes them: keys in dictsort order, bare, at every level
        return "".join(f"{self.trigger}call:{n}{_gemma(a)}{self.call_end}" for n, a in calls)

    def body(self, tools, parallel, lit):
        g = _Rules(lit(QUOTE))
        fns = []
        for i, t in enumerate(tools):
            fns.append(f"f{i}")
            g.rules.append(f"f{i}: {text_lit('call:' + t.name)} {g.value(f'f{i}', _closed(t.parameters))}")
        g.rules.append(f"one_call: ({' | '.join(fns)}) {lit(self.call_end)}")
        return _repeat("one_call", lit(self.trigger), parallel) + "\n".join(g.rules) + "\n"


def _read(text: str, pos: int, tools) -> tuple[Partial | None, int | None]:
    """``call:NAME`` then the arguments ``{...}``."""
    s = _Scan(text, pos)
    s.ws()
    if not s.take("call:"):
        return None, (None if "call:".startswith(text[s.pos :]) else -1)
    m = _NAME.match(text, s.pos)
    if m.end() >= len(text):  # type: ignore[union-attr]
        return None, None
    if text[m.end()] != "{" or not m.group():  # type: ignore[union-attr]
        return None, -1
    name = m.group()  # type: ignore[union-attr]
    args, end = _Args(text, types_of(tools, name)).read(m.end())  # type: ignore[union-attr]
    if end is not None and end < 0:  # not Gemma's syntax: the call ends, its arguments' text is content
        return Partial(name, args, stop=m.end()), -1  # type: ignore[union-attr]
    return Partial(name, args), end


class _More(Exception):
    """The text ends inside the arguments."""


class _Bad(Exception):
    """The text is not Gemma's argument syntax."""


class _Args:
    """Gemma's arguments ``{k:v,…}`` in ``text`` as JSON text as far as they are written,
    spaced as ``json.dumps`` spaces them. ``types``: the tool's parameters' schemas (a bare
    value of a string parameter is its text)."""

    def __init__(self, text: str, types: dict):
        self.text, self.types, self.out = text, types, []

    def read(self, pos: int) -> tuple[str, int | None]:
        """The JSON text so far and where the object ends (None: not yet; -1: not Gemma's)."""
        try:
            end = self._object(pos, self.types)
        except _More:
            return "".join(self.out), None
        except _Bad:
            return "".join(self.out), -1
        return "".join(self.out), end

    def _ws(self, i: int) -> int:
        i = _WS.match(self.text, i).end()  # type: ignore[union-attr]
        if i >= len(self.text):
            raise _More
        return i

    def _object(self, i: int, types: dict | None) -> int:
        self.out.append("{")
        i = self._ws(i + 1)
        first = True
        while self.text[i] != "}":
            key, i = self._key(i)
            i = self._ws(i)
            if self.text[i] != ":":
                raise _Bad
            self.out.append(("" if first else ", ") + json.dumps(key, ensure_ascii=False) + ": ")
            first = False
            i = self._ws(self._value(self._ws(i + 1), types.get(key) if types is not None else None))
            if self.text[i] == ",":
                i = self._ws(i + 1)
            elif self.text[i] != "}":
                raise _Bad
        self.out.append("}")
        return i + 1

    def _array(self, i: int) -> int:
        self.out.append("[")
        i = self._ws(i + 1)
        first = True
        while self.text[i] != "]":
            if not first:
                self.out.append(", ")
            first = False
            i = self._ws(self._value(i, None))
            if self.text[i] == ",":
                i = self._ws(i + 1)
            elif self.text[i] != "]":
                raise _Bad
        self.out.append("]")
        return i + 1

    def _key(self, i: int) -> tuple[str, int]:
        t = self.text
        if t.startswith(QUOTE, i):
            j = t.find(QUOTE, i + len(QUOTE))
            if j < 0:
                raise _More
            return t[i + len(QUOTE) : j], j + len(QUOTE)
        if QUOTE.startswith(t[i:]):
            raise _More
        if t[i] == '"':
            m = _JSON_STR.match(t, i)
            if m is None:
                raise _More
            return json.loads(m.group()), m.end()
        m = _KEY.match(t, i)
        if m.end() >= len(t):  # type: ignore[union-attr]
            raise _More
        if not m.group():  # type: ignore[union-attr]
            raise _Bad
        return m.group(), m.end()  # type: ignore[union-attr]

    def _value(self, i: int, schema) -> int:
        t = self.text
        if t.startswith(QUOTE, i):  # a string: streamed as written
            j = t.find(QUOTE, i + len(QUOTE))
            if j < 0:
                s = t[i + len(QUOTE) :]
                self.out.append('"' + _esc(s[: len(s) - held(s, QUOTE)]))
                raise _More
            self.out.append('"' + _esc(t[i + len(QUOTE) : j]) + '"')
            return j + len(QUOTE)
        if QUOTE.startswith(t[i:]):
            raise _More
        if t[i] == "{":
            return self._object(i, None)
        if t[i] == "[":
            return self._array(i)
        if t[i] == '"':  # a JSON string
            out, end = json_prefix(t, i)
            self.out.append(out)
            if end is None:
                raise _More
            return end
        m = _BARE.match(t, i)
        if m.end() >= len(t):  # type: ignore[union-attr]
            raise _More
        raw = m.group().strip()  # type: ignore[union-attr]
        if not raw:
            raise _Bad
        self.out.append(_scalar(raw, schema))
        return m.end()  # type: ignore[union-attr]


def _esc(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)[1:-1]


def _scalar(raw: str, schema) -> str:
    """A bare value as JSON: a literal, a number, else (or for a string parameter) text."""
    if raw in ("null", "None"):
        return "null"
    if is_string(schema):
        return json.dumps(raw, ensure_ascii=False)
    if raw in ("true", "True", "false", "False"):
        return raw.lower()
    try:
        v = json.loads(raw)
    except ValueError:
        v = None
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return json.dumps(v)
    return json.dumps(raw, ensure_ascii=False)


def _gemma(value) -> str:
    """``value`` as the template's ``format_argument`` writes it (keys bare)."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: str(kv[0]).lower())  # Jinja's dictsort
        return "{" + ",".join(f"{k}:{_gemma(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_gemma(v) for v in value) + "]"
    return str(value)


class _Rules:
    """Lark rules for values in Gemma's syntax, from their JSON schemas: strings between
    quotes (free text, or one of an enum), objects with their listed keys in dictsort
    order, lists; any other schema (numbers, booleans, ``anyOf`` …) as JSON, which the
    parser reads too."""

    def __init__(self, quote: str):
        self.q, self.rules, self._strings = quote, [], set()

    def value(self, name: str, schema) -> str:
        s = schema if isinstance(schema, dict) else {}
        if is_string(s) and "enum" in s:
            return f"{self.q} ({' | '.join(text_lit(v) for v in s['enum'])}) {self.q}"
        if is_string(s):
            return self._string(s.get("maxLength"))
        if s.get("type", "object" if "properties" in s else None) == "object" and not _combined(s):
            props = sorted((s.get("properties") or {}).items(), key=lambda kv: kv[0].lower())
            if not props and s.get("additionalProperties") is False:
                return '"{}"'
            if props and isinstance(s.get("properties"), dict):
                required = set(s.get("required", []) or [])
                members = [
                    (k, f"{self._key(k)} {self.value(f'{name}_{j}', v)}", k in required)
                    for j, (k, v) in enumerate(props)
                ]
                return f'"{{" {_Members(name, members, self.rules).first()} "}}"'
        if (
            s.get("type") == "array"
            and isinstance(s.get("items"), dict)
            and not _combined(s)
            and not ({"minItems", "maxItems", "uniqueItems", "prefixItems", "contains"} & s.keys())
        ):
            item = f"{name}_i"
            self.rules.append(f"{item}: {self.value(item, s['items'])}")
            return f'"[" ({item} ("," {item})*)? "]"'
        return _json_rule(s)

    def _key(self, key: str) -> str:
        """``key:``, bare as the template writes keys, or quoted where it could not be read bare."""
        if key and _KEY.fullmatch(key):
            return text_lit(key + ":")
        return f'{self.q} {text_lit(key)} {self.q} ":"'

    def _string(self, most) -> str:
        most = int(most) if isinstance(most, int) and not isinstance(most, bool) else None
        rule = "gstr" if most is None else f"gstr{most}"
        if rule not in self._strings:
            self._strings.add(rule)
            text = "/(?s:.*)/" if most is None else f"/(?s:.){{0,{most}}}/"
            if self.q.startswith("<["):  # a special token: free text cannot hold it
                self.rules.append(f"{rule}: {self.q} {text} {self.q}")
            else:  # text: the string ends at the first quote
                self.rules.append(f"{rule}_v[lazy]: {text} {self.q}")
                self.rules.append(f"{rule}: {self.q} {rule}_v")
        return rule


def _combined(schema: dict) -> bool:
    return any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref", "not", "if", "enum", "const"))


class _Members:
    """An object's members ``k:v`` separated by commas, in order, the optional ones
    skippable: ``s{j}`` is the members from ``j`` on with none written yet, ``t{j}`` with
    one written (so each after the first is preceded by a comma); a rule is made only
    when used, and only for a nonempty text (``?`` where it may be empty)."""

    def __init__(self, name: str, members: list[tuple[str, str, bool]], rules: list[str]):
        self.name, self.members, self.rules, self.made = name, members, rules, set()

    def _empty(self, j: int) -> bool:
        return all(not req for _, _, req in self.members[j:])

    def first(self) -> str:
        return self._ref("s", 0)

    def _ref(self, kind: str, j: int) -> str:
        if j >= len(self.members):
            return ""
        rule = f"{self.name}_{kind}{j}"
        if rule not in self.made:
            self.made.add(rule)
            _, member, required = self.members[j]
            rest = self._ref("t", j + 1)
            one = ('"," ' if kind == "t" else "") + member + (f" {rest}" if rest else "")
            alts = [one] if required or j + 1 >= len(self.members) else [one, self._ref(kind, j + 1).rstrip("?")]
            self.rules.append(f"{rule}: {' | '.join(alts)}")
        return rule + ("?" if self._empty(j) else "")


GEMMA4 = Gemma4()
