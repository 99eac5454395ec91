"""What every tool-call format is made of: the :class:`ToolFormat` interface (detect,
find, scan and parse, write, grammar), the grammar literals (:data:`Lit`,
:func:`text_lit`) and the helpers the families' parsers and grammars share. A family
module subclasses :class:`ToolFormat`; this module knows none of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from engine.runtime.prompt.calls.partial import Partial, held, is_string, json_error, json_prefix
from engine.runtime.prompt.tools import Tool, ToolCall

#: a grammar literal for marker text: special tokens as ``<[id]>``, text as a string
Lit = Callable[[str], str]

_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def text_lit(text: str) -> str:
    """A Lark string literal for ``text`` (no special tokens)."""
    return json.dumps(text, ensure_ascii=False)


def _json_rule(schema: dict) -> str:
    """An inline JSON schema of a call, generated compact like every JSON constraint here
    (lenient: see TOOL_JSON_OPTIONS)."""
    from engine.runtime.decode.grammar import TOOL_JSON_OPTIONS

    schema = {**schema, "x-guidance": TOOL_JSON_OPTIONS} if isinstance(schema, dict) else schema
    return "%json " + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _closed(schema: dict) -> dict:
    """A tool's arguments schema with no arguments beyond those it lists, unless it says
    otherwise: a call with made-up arguments is no use to the tool."""
    if isinstance(schema, dict) and schema.get("type", "object") == "object" and "additionalProperties" not in schema:
        return {**schema, "additionalProperties": False}
    return schema


def _call_object(tool: Tool, name_key: str, args_key: str) -> dict:
    return {
        "type": "object",
        "properties": {name_key: {"const": tool.name}, args_key: _closed(tool.parameters)},
        "required": [name_key, args_key],
        "additionalProperties": False,
    }


def _args(value) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


class _Scan:
    """A cursor over reply text for the parsers."""

    def __init__(self, text: str, pos: int = 0):
        self.text, self.pos = text, pos

    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def take(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False

    def until(self, s: str) -> str | None:
        i = self.text.find(s, self.pos)
        if i < 0:
            return None
        out = self.text[self.pos : i]
        self.pos = i + len(s)
        return out

    @property
    def done(self) -> bool:
        return self.pos >= len(self.text)


def json_args(text: str, pos: int) -> tuple[str, int | None]:
    """Arguments written as a JSON object at ``text[pos]`` (after whitespace): their JSON
    text so far, re-spaced (:func:`.partial.json_prefix`), and where the object ends once
    it is complete and is an object (else None)."""
    i = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if i >= len(text):
        return "", None
    if text[i] != "{":
        return "", -1
    err = json_error(text, i)
    if err is not None:  # not JSON from there on: what came before it, and "not a call"
        return json_prefix(text[:err], i)[0], -1
    out, end = json_prefix(text, i)
    if end is not None:
        try:
            ok = isinstance(json.loads(out), dict)
        except ValueError:
            ok = False
        if not ok:
            return out, -1
    return out, end


_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"(?=\s*[,}])')
_ARGS = re.compile(r'"(arguments|parameters)"\s*:\s*')


def wrapped_call(text: str, pos: int) -> tuple[Partial | None, int | None]:
    """A call written as ``{"name": NAME, "arguments": {...}}`` (or ``"parameters"``) at
    ``text[pos]``: the call so far (None until its name is complete) and where the object
    ends once it is complete (-1: it is not such a call)."""
    i = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if i >= len(text):
        return None, None
    if text[i] != "{":
        return None, -1
    try:
        obj, end = _DECODER.raw_decode(text, i)
    except ValueError:
        obj = end = None
    if end is not None:  # whole: read it as JSON
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            return None, -1
        args = obj.get("arguments", obj.get("parameters", {}))
        a = _ARGS.search(text, i, end)
        if isinstance(args, dict) and a is not None:
            out, _ = json_prefix(text, a.end())
        elif isinstance(args, dict | str) and _args(args) is not None:
            out = json.dumps(_args(args), ensure_ascii=False)
        else:  # a name, then arguments that are no object: they are content
            return Partial(obj["name"], "", stop=a.end() if a is not None else end), -1
        return Partial(obj["name"], out, True), end
    err = json_error(text, i)
    a = _top_key(text, i, _ARGS)
    m = _top_key(text, i, _NAME, a.start() if a else len(text))
    if m is None:
        return None, (None if err is None else -1)
    try:
        name = json.loads(f'"{m.group(1)}"')
    except ValueError:
        return None, -1
    args = ""
    if a is not None and text[_WS.match(text, a.end()).end() :].startswith("{"):  # type: ignore[union-attr]
        args, _ = json_prefix(text[:err] if err is not None else text, a.end())
    if err is not None:  # the object breaks off: the call ends there, the rest is content
        return Partial(name, args, stop=err), -1
    return Partial(name, args), None


def _top_key(text: str, start: int, pattern: re.Pattern, end: int | None = None) -> re.Match | None:
    """The first match of ``pattern`` at the top level of the object at ``text[start]``
    (not inside a nested value or a string)."""
    depth, in_str, esc = 0, False, False
    stop = len(text) if end is None else end
    for k in range(start, stop):
        ch = text[k]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            if depth == 1:
                m = pattern.match(text, k)
                if m is not None and m.end() <= stop:
                    return m
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return None


#: reads one call's body at ``text[pos]``: the call so far (None: no name yet) and where
#: the body ends (None: not yet; -1: it is not a call)
Reader = Callable[[str, int], "tuple[Partial | None, int | None]"]


def calls_between(
    text: str, opener: str, closer: str, read: Reader, sep: str = "", first: str = "", last: str = "", start: int = 0
) -> tuple[list[Partial], int]:
    """Calls written ``opener BODY closer`` one after another from ``text[start]``
    (optionally separated by ``sep``, all inside ``first`` … ``last``), each body read by
    ``read``: the calls so far and where the last closed one (or ``last``) ends (0: none
    closed)."""
    s, out, end = _Scan(text, start), [], 0
    s.ws()
    if first and not s.take(first):
        return [], 0
    while True:
        s.ws()
        if out and sep:
            if not s.take(sep):
                break
            s.ws()
        if not s.take(opener):
            break
        body = s.pos
        p, e = read(text, body)
        if p is None or e is None or e < 0:
            if p is not None and e is None:
                out.append(p)
            elif p is not None:  # named, then not well formed: it ends where it went wrong
                out.append(Partial(p.name, p.args, stop=body if p.stop is None else p.stop))
            break
        s.pos = e
        s.ws()
        if closer and not s.take(closer):
            if closer.startswith(text[s.pos : s.pos + len(closer)]):
                out.append(Partial(p.name, p.args))  # its closer may be on its way
            else:  # something else follows the call: it ends here, and that is content
                out.append(Partial(p.name, p.args, stop=e))
            break
        out.append(Partial(p.name, p.args, True))
        end = s.pos
    if last and out and out[-1].done:
        s.pos = end
        s.ws()
        if s.take(last):
            end = s.pos
    return out, end


def bad_json_at(text: str, pos: int) -> int:
    """Where arguments at ``text[pos]`` that are not a JSON object stop being the call's:
    at their start when they are not an object at all, else past the braces."""
    i = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if i >= len(text) or text[i] != "{":
        return i
    err = json_error(text, i)
    if err is not None:
        return err
    end = json_prefix(text, i)[1]
    return len(text) if end is None else end


def name_then_json(sep: str, clean=lambda name: name) -> Reader:
    """A reader of ``NAME sep {arguments}``."""

    def read(text: str, pos: int):
        i = text.find(sep, pos)
        if i < 0:
            return None, None
        name = clean(text[pos:i]).strip()
        if not name:
            return None, -1
        args, end = json_args(text, i + len(sep))
        if end is not None and end < 0:
            return Partial(name, args, stop=bad_json_at(text, i + len(sep))), -1
        return Partial(name, args), end

    return read


def upto(rule: str, end: str, most: int | None = None) -> list[str]:
    """Rules making ``rule`` free text (at most ``most`` characters) up to and with the
    grammar literal ``end`` (:data:`~.base.Lit` output): lazy when ``end`` is text; when it
    is a special token (which text never holds), the text runs to it; when it is text
    then a special token, the text runs to that text, which the value may also go past
    (the bound then holds for each stretch)."""
    body = f"/(?s:.){{0,{int(most)}}}/" if isinstance(most, int) else "/(?s:.*)/"
    if "<[" not in end:
        return [f"{rule}[lazy]: {body} {end}"]
    if end.startswith("<["):
        return [f"{rule}: {body} {end}"]
    head, i = _DECODER.raw_decode(end)
    return [f"{rule}_s[lazy]: {body} {text_lit(head)}", f"{rule}: {rule}_s+ {end[i:].strip()}"]


def params_of(tool: Tool) -> list[tuple[str, dict, bool]]:
    """A tool's parameters in its schema's order: (name, schema, required)."""
    params = tool.parameters if isinstance(tool.parameters, dict) else {}
    props = params.get("properties", {}) or {}
    required = set(params.get("required", []) or [])
    return [(k, sch if isinstance(sch, dict) else {}, k in required) for k, sch in props.items()]


def param_rules(
    rule: str, head: str, schema: dict, end: str, after: str = "", as_text: str = "", as_json: str = ""
) -> list[str]:
    """Lark rules defining ``rule``, one parameter written as parameters are (XML, DSML,
    MiniMax): ``head``, its value as its schema says — an enum's alternatives, a string as
    free text up to ``end`` (:func:`upto`), anything else as JSON — then ``end`` and
    ``after``. ``as_text``/``as_json``: what the head goes on with before a value taken as
    text or as JSON (DSML's ``string=`` attribute)."""
    tail = f"{end} {after}".rstrip()
    if is_string(schema) and "enum" in schema:
        return [f"{rule}: {head} {as_text} ({' | '.join(text_lit(v) for v in schema['enum'])}) {tail}"]
    if is_string(schema):
        return [*upto(f"{rule}_v", end, schema.get("maxLength")), f"{rule}: {head} {as_text} {rule}_v {after}".rstrip()]
    return [f"{rule}: {head} {as_json} {_json_rule(schema)} {tail}"]


def _repeat(one: str, sep: str, parallel: bool) -> str:
    return f"call_body: {one}" + (f" ({sep} {one})*" if parallel else "") + "\n"


#: every family's CONTROL_MARKERS, in the order the families are defined (the registry
#: imports them in a fixed order)
_CONTROL: list[str] = []


@dataclass(frozen=True)
class ToolFormat:
    """One family of call syntax."""

    name: str
    label: str
    #: text that opens the calls in a reply ("" : calls are the whole reply, JSON)
    trigger: str
    #: the marker that ends one call (streaming emits a call when it has seen it)
    call_end: str = ""

    #: markers the family writes besides its trigger and call end that a vocabulary may
    #: hold as control tokens (collected from every family into :attr:`markers`)
    CONTROL_MARKERS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.scan is ToolFormat.scan and cls.partial is ToolFormat.partial:
            raise TypeError(f"{cls.__name__} must define partial() (or scan(), if it does not stream)")
        _CONTROL.extend(m for m in cls.CONTROL_MARKERS if m not in _CONTROL)

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker the format writes, and every family's control markers (a vocabulary
        may hold another family's): shown as text even where a vocabulary holds them as
        control tokens, so the parser sees them."""
        return tuple(m for m in (self.trigger, self.call_end, *_CONTROL) if m)

    # ---------------------------------------------------------------- detect
    def detects(self, template: str) -> bool:
        """Whether a chat template's text teaches this format. The registry asks the
        formats in its order and takes the first that says yes, so a rule may count on
        the formats before it having said no."""
        raise NotImplementedError

    @property
    def openers(self) -> tuple[str, ...]:
        """Text that may open the calls (streamed content holds back what may begin one)."""
        return (self.trigger,) if self.trigger else ()

    def held(self, text: str) -> int:
        """How many characters at the end of streamed content may begin the calls (they are
        held back until it is clear)."""
        return max((held(text, o) for o in self.openers), default=0)

    #: the template renders one call per assistant turn (harmony): a turn with several is
    #: given to it as one turn per call, each followed by its result
    one_call_per_turn: ClassVar[bool] = False

    # ----------------------------------------------------------------- parse
    def find(self, text: str) -> int:
        """Where the calls start in ``text`` (-1: no call)."""
        if self.trigger:
            return text.find(self.trigger)
        stripped = text.lstrip()
        return len(text) - len(stripped) if stripped.startswith(("{", "<|python_tag|>")) else -1

    def parse(self, text: str, tools: tuple[Tool, ...] = ()) -> list[ToolCall] | None:
        """The calls ``text`` (starting at the trigger) holds, or None when it is not a
        complete, well-formed list of calls."""
        calls, end = self.scan(text, tools)
        if not calls or text[end:].strip():
            return None
        return calls

    def scan(self, text: str, tools: tuple[Tool, ...] = ()) -> tuple[list[ToolCall], int]:
        """The complete calls at the start of ``text`` and where the last one ends (from
        :meth:`partial`, unless a format that does not stream says otherwise)."""
        parts, end = self.partial(text, tools)
        calls = []
        for p in parts:
            if not p.done:
                break
            calls.append(ToolCall(p.name, p.args))
        return calls, end

    def partial(self, text: str, tools: tuple[Tool, ...] = ()) -> tuple[list[Partial], int]:
        """The calls at the start of ``text`` as far as they are written: each whose name is
        complete, with its arguments' JSON text so far (:mod:`.partial`), and where the
        last closed one ends. A format that does not stream reports closed calls only."""
        calls, end = self.scan(text, tools)
        return [Partial(c.name, c.arguments, True) for c in calls], end

    # ----------------------------------------------------------------- write
    def write(self, calls: list[tuple[str, dict]]) -> str:
        raise NotImplementedError

    # --------------------------------------------------------------- grammar
    def body(self, tools: tuple[Tool, ...], parallel: bool, lit: Lit) -> str:
        """Lark rules defining ``call_body``: what follows the trigger (or the whole
        reply when there is none), one call or, with ``parallel``, several."""
        raise NotImplementedError
