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
    return {"type": "object", "properties": {name_key: {"const": tool.name}, args_key: _closed(tool.parameters)},
            "required": [name_key, args_key], "additionalProperties": False}  # fmt: skip


def _args(value) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _call(name, args) -> ToolCall | None:
    if not isinstance(name, str) or not name:
        return None
    a = _args(args)
    if a is None:
        return None
    return ToolCall(name, json.dumps(a, ensure_ascii=False))


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

    def json(self):
        try:
            value, end = _DECODER.raw_decode(self.text, self.pos)
        except ValueError:
            return _FAIL
        self.pos = end
        return value

    @property
    def done(self) -> bool:
        return self.pos >= len(self.text)


_FAIL = object()


def _name_then_json(text: str, opener: str, sep: str, closer: str, clean=lambda name: name) -> tuple[list[ToolCall], int]:
    """Calls written ``opener NAME sep {arguments} closer``, one after another."""
    s, calls, end = _Scan(text), [], 0
    while True:
        s.ws()
        if not s.take(opener):
            break
        name = s.until(sep)
        obj = s.json() if name is not None else _FAIL
        c = _call(clean(name).strip(), obj) if name is not None and obj is not _FAIL else None
        if c is None or not s.take(closer):
            break
        calls.append(c)
        end = s.pos
    return calls, end


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
        """The complete calls at the start of ``text`` and where the last one ends."""
        raise NotImplementedError

    # ----------------------------------------------------------------- write
    def write(self, calls: list[tuple[str, dict]]) -> str:
        raise NotImplementedError

    # --------------------------------------------------------------- grammar
    def body(self, tools: tuple[Tool, ...], parallel: bool, lit: Lit) -> str:
        """Lark rules defining ``call_body``: what follows the trigger (or the whole
        reply when there is none), one call or, with ``parallel``, several."""
        raise NotImplementedError
