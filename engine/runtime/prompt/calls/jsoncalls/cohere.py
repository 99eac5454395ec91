"""The Cohere call family (Command R7B, Command A / Cohere2 MoE): a JSON list of calls
between action markers, each naming its tool ``tool_name`` and its arguments
``parameters``, numbered by ``tool_call_id``::

    <|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": NAME, "parameters": {...}},
        {"tool_call_id": "1", "tool_name": NAME, "parameters": {...}}
    ]<|END_ACTION|>

A call is done when its object closes; the list's ``]`` and ``<|END_ACTION|>`` end them.
Around the calls: thinking in ``<|START_THINKING|>…<|END_THINKING|>``, the answer in
``<|START_TEXT|>…<|END_TEXT|>`` (Cohere2 MoE) or ``<|START_RESPONSE|>…<|END_RESPONSE|>``
(R7B), see :data:`TEXT_SPANS`.
"""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import ToolFormat, _args, _closed, _json_rule, _Scan
from engine.runtime.prompt.calls.partial import Partial, json_error, json_prefix
from engine.runtime.prompt.tools import Tool

START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"
#: the markers an answer may sit between (the reply parser takes what is inside as content)
TEXT_SPANS = (("<|START_TEXT|>", "<|END_TEXT|>"), ("<|START_RESPONSE|>", "<|END_RESPONSE|>"))
THINKING = ("<|START_THINKING|>", "<|END_THINKING|>")
_ID, _NAME, _ARGS = "tool_call_id", "tool_name", "parameters"


class Cohere(ToolFormat):
    def __init__(self):
        super().__init__("cohere", "Cohere <|START_ACTION|> JSON list", START_ACTION, END_ACTION)

    def detects(self, template):
        return START_ACTION in template and f'"{_NAME}"' in template

    def partial(self, text, tools=()):
        s, out, end = _Scan(text), [], 0
        s.ws()
        if not s.take(START_ACTION):
            return [], 0
        s.ws()
        if not s.take("["):
            return [], 0
        while True:
            s.ws()
            if out and not s.take(","):
                break
            p, e = _read(text, s.pos)
            if p is not None and (e is None or e < 0):
                out.append(p)  # open (or it went wrong after its name: what was sent stays)
            if p is None or e is None or e < 0:
                break
            out.append(Partial(p.name, p.args, True))
            s.pos = end = e
        if out and out[-1].done:
            s.pos = end
            s.ws()
            if s.take("]"):
                end = s.pos
                s.ws()
                end = s.pos if s.take(END_ACTION) else end
        return out, end

    def write(self, calls):
        items = ",".join(
            f"\n    {json.dumps({_ID: str(i), _NAME: n, _ARGS: a}, ensure_ascii=False)}"
            for i, (n, a) in enumerate(calls)
        )
        return f"{START_ACTION}[{items}\n]{END_ACTION}"

    def body(self, tools, parallel, lit):
        items = {"anyOf": [_item(t) for t in tools]}
        arr = {"type": "array", "items": items, "minItems": 1, **({} if parallel else {"maxItems": 1})}
        return f"call_body: {_json_rule(arr)} {lit(END_ACTION)}\n"


def _item(tool: Tool) -> dict:
    """The schema of one call to ``tool``, keys in the template's order (ids are small)."""
    props = {
        _ID: {"type": "string", "pattern": "^[0-9]{1,3}$"},
        _NAME: {"const": tool.name},
        _ARGS: _closed(tool.parameters),
    }
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _read(text: str, pos: int) -> tuple[Partial | None, int | None]:
    """One call object at ``text[pos]``, its top-level keys read in order: the call once
    ``tool_name`` is whole, its ``parameters``' JSON text so far, and where the object
    ends (None: not yet; -1: not a call)."""
    s = _Scan(text, pos)
    s.ws()
    if s.done:
        return None, None
    if not s.take("{"):
        return None, -1
    start, name, args_at, closed, bad = s.pos - 1, None, None, False, False
    while True:
        s.ws()
        if s.done:
            break
        if s.take("}"):
            closed = True
            break
        key = _value(s)
        if key is None or s.done:
            break
        if not key.startswith('"') or not s.take(":"):
            bad = True
            break
        s.ws()
        if key == f'"{_ARGS}"':
            args_at = s.pos
        value = _value(s)
        if value is None:
            break
        if key == f'"{_NAME}"':
            name = json.loads(value) if value.startswith('"') else None
            if not name:
                return None, -1
        if not s.take(",") and not s.done and not text.startswith("}", s.pos):
            bad = True
            break
    err = json_error(text, start)
    so_far = ""
    if args_at is not None and text.startswith("{", args_at):
        so_far = json_prefix(text[:err] if err is not None else text, args_at)[0]
    if name is None:
        return None, (-1 if closed or bad or err is not None else None)
    if bad or err is not None:  # named, then broken: it ends there, and the rest is content
        return Partial(name, so_far, stop=err if err is not None else s.pos), -1
    if not closed:
        return Partial(name, so_far), None
    try:
        a = _args(json.loads(text[start : s.pos]).get(_ARGS, {}))
    except ValueError:
        a = None
    if a is None:
        return Partial(name, so_far, stop=start), -1
    return Partial(name, so_far or json.dumps(a, ensure_ascii=False)), s.pos


def _value(s: _Scan) -> str | None:
    """The JSON value at the cursor, re-spaced, the cursor then past it and any whitespace
    (None: it is not whole yet)."""
    out, end = json_prefix(s.text, s.pos)
    if end is None:
        return None
    s.pos = end
    s.ws()
    return out


COHERE = Cohere()
