"""Calls as they are being written: what a format's :meth:`~.base.ToolFormat.partial`
returns, and the two ways arguments become JSON text that only ever grows.

A client shows a call's arguments as the model writes them, so a streamed call is sent as
its name, then its arguments in pieces, and a piece once sent is never taken back. Every
format therefore reports, for the text seen so far, each call whose name is complete and
the JSON text of its arguments *so far*: a prefix of what it will be when the call closes,
and, once closed, exactly the call's ``arguments``. Both the whole-reply parse and the
stream read calls this way, so they agree to the character.

* Arguments written as JSON (Hermes, Llama 3, DeepSeek, Kimi, GPT-OSS …) are re-spaced as
  they come (:func:`json_prefix`): ``{"city":"Paris"}`` becomes ``{"city": "Paris"}``, as
  ``json.dumps`` writes it, token by token; a number or a string escape is sent when it
  is whole.
* Arguments written as parameters (XML ``<parameter=…>``, GLM's ``<arg_key>``, DSML,
  MiniMax's ``<parameter name=…>``, Gemma 4's ``k:<|"|>v<|"|>``) are converted to JSON text
  (:func:`params_json`): a string parameter's value streams character by character; any
  other is sent when its parameter closes, typed through the tool's JSON schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_WS = " \t\r\n"
_STRUCT = "{}[],:"


@dataclass(frozen=True)
class Partial:
    """One call in the text so far: its name, the JSON text of its arguments so far, and
    whether it has closed (then ``args`` is final). ``stop``: the call's text turned out not
    to be well formed from this offset on; the call ends there, with its arguments as far
    as they were read, and what follows is content (a call once streamed is never taken
    back, and no text is lost)."""

    name: str
    args: str
    done: bool = False
    stop: int | None = None


def held(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` could begin ``marker`` (to hold back)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def _esc(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)[1:-1]


def json_prefix(text: str, start: int = 0) -> tuple[str, int | None]:
    """The JSON value starting at ``text[start]`` (after any whitespace), re-spaced as
    ``json.dumps`` spaces it, as far as it is written: ``(out, end)`` with ``end`` the
    offset just past the value when it is complete, else None. What ``out`` holds of an
    incomplete value is a prefix of what it will hold when complete. Not a validator: the
    caller checks a complete value with ``json.loads`` where it matters."""
    out: list[str] = []
    depth = 0
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch in _WS:
            i += 1
            continue
        if ch == '"':
            j, buf, closed = i + 1, [], False
            while j < n:
                c = text[j]
                if c == '"':
                    closed = True
                    break
                if c == "\\":
                    if j + 1 >= n:
                        break
                    e = text[j + 1]
                    if e == "u":
                        if j + 6 > n:
                            break
                        try:
                            code = int(text[j + 2 : j + 6], 16)
                        except ValueError:
                            buf.append(text[j : j + 6])
                            j += 6
                            continue
                        if 0xD800 <= code < 0xDC00:  # a surrogate pair's first half: one character with the second
                            if j + 12 > n and text[j + 6 : j + 8] in ("", "\\", "\\u"[: n - j - 6]):
                                break  # the second half may be on its way
                            low = text[j + 8 : j + 12] if text[j + 6 : j + 8] == "\\u" else ""
                            if (
                                len(low) == 4
                                and all(c in "0123456789abcdefABCDEF" for c in low)
                                and 0xDC00 <= int(low, 16) < 0xE000
                            ):
                                buf.append(chr(0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)))
                                j += 12
                                continue
                        buf.append("\ufffd" if 0xD800 <= code < 0xE000 else chr(code))  # a lone half: not text
                        j += 6
                        continue
                    buf.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(e, e))
                    j += 2
                    continue
                buf.append(c)
                j += 1
            out.append('"' + _esc("".join(buf)))
            if not closed:
                return "".join(out), None
            out.append('"')
            i = j + 1
        elif ch in "{[":
            out.append(ch)
            depth += 1
            i += 1
        elif ch in "}]":
            out.append(ch)
            depth -= 1
            i += 1
        elif ch == ",":
            out.append(", ")
            i += 1
        elif ch == ":":
            out.append(": ")
            i += 1
        else:  # a number or a literal: sent whole
            j = i
            while j < n and text[j] not in _WS and text[j] not in _STRUCT and text[j] != '"':
                j += 1
            if j >= n:
                return "".join(out), None
            out.append(text[i:j])
            i = j
        if depth <= 0:
            return "".join(out), i
    return "".join(out), None


def closing(prefix: str) -> str:
    """What closes JSON text ``prefix`` (an object's beginning, as :func:`json_prefix` and
    :func:`params_json` write it) into a whole value: a call whose text broke off is given
    arguments that parse, by adding to what was sent, never by taking any back."""
    stack: list[str] = []
    in_str = esc = False
    last = ""  # the last significant character outside strings ('"' for a string)
    key = False  # the string open or last closed is an object's key
    for ch in prefix:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str, last = False, '"'
            continue
        if ch == '"':
            key = bool(stack) and stack[-1] == "{" and last in ("{", ",")
            in_str = True
        elif ch in "{[":
            stack.append(ch)
            last = ch
        elif ch in "}]":
            if stack:
                stack.pop()
            last = ch
        elif ch in ",:":
            last = ch
        elif not ch.isspace():
            last = "v"
    out = ""
    if in_str:
        out += ("\\" if esc else "") + '"'
        last = '"'
    if last == '"' and key:
        out += ": null"
    elif last == ":":
        out += "null"
    elif last == ",":
        out += '"": null' if stack and stack[-1] == "{" else "null"
    return out + "".join("}" if b == "{" else "]" for b in reversed(stack))


_HEX = set("0123456789abcdefABCDEF")
_NUMBER_SO_FAR = re.compile(r"-?\d*(\.\d*)?([eE][+-]?\d*)?")


def json_error(text: str, start: int = 0) -> int | None:
    """Where ``text[start:]`` stops being the beginning of one JSON value (None: it is
    one so far, or a whole one, whatever follows it). :func:`json_prefix` re-spaces what
    it is given without judging it; a call's reader asks this first."""
    stack: list[str] = []
    expect = "value"  # value | value_or_close | key | key_or_close | colon | comma
    i, n = start, len(text)

    def after_value() -> str:
        return "done" if not stack else "comma"

    while i < n:
        ch = text[i]
        if ch in _WS:
            i += 1
            continue
        if expect == "done":
            return None
        if ch == '"' and expect in ("value", "value_or_close", "key", "key_or_close"):
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    if j + 1 >= n:
                        return None
                    e = text[j + 1]
                    if e == "u":
                        hexes = text[j + 2 : j + 6]
                        if not all(c in _HEX for c in hexes):
                            return j
                        j += 6
                        continue
                    if e not in '"\\/bfnrt':
                        return j
                    j += 2
                    continue
                if text[j] < " ":
                    return j
                j += 1
            if j >= n:
                return None
            i = j + 1
            expect = "colon" if expect in ("key", "key_or_close") else after_value()
        elif expect in ("value", "value_or_close"):
            if ch == "{":
                stack.append("{")
                expect = "key_or_close"
                i += 1
            elif ch == "[":
                stack.append("[")
                expect = "value_or_close"
                i += 1
            elif ch == "]" and expect == "value_or_close":
                stack.pop()
                i += 1
                expect = after_value()
            else:
                j = i
                while j < n and text[j] not in _WS and text[j] not in _STRUCT and text[j] != '"':
                    j += 1
                word = text[i:j]
                if j >= n:  # a literal still being written
                    ok = any(w.startswith(word) for w in ("true", "false", "null")) or _NUMBER_SO_FAR.fullmatch(word)
                    return None if ok else i
                try:
                    json.loads(word)
                except ValueError:
                    return i
                if not word:
                    return i
                i = j
                expect = after_value()
        elif expect == "key_or_close" and ch == "}":
            stack.pop()
            i += 1
            expect = after_value()
        elif expect == "colon" and ch == ":":
            expect = "value"
            i += 1
        elif expect == "comma" and ch == ",":
            expect = "key" if stack[-1] == "{" else "value"
            i += 1
        elif expect == "comma" and ch == ("}" if stack[-1] == "{" else "]"):
            stack.pop()
            i += 1
            expect = after_value()
        else:
            return i
    return None


def is_string(schema) -> bool:
    """A JSON schema whose values are strings (a parameter taken as written)."""
    if not isinstance(schema, dict):
        return False
    t = schema.get("type")
    return (
        t == "string"
        or (isinstance(t, list) and t == ["string"])
        or ("enum" in schema and all(isinstance(v, str) for v in schema["enum"]) and "type" not in schema)
    )


def typed(raw: str, schema) -> object:
    """A parameter's value: as written for a string parameter, else JSON (as written when
    it is not JSON)."""
    if is_string(schema):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def params_json(params: list[tuple[str, str, bool]], types: dict, done: bool) -> str:
    """Arguments written as parameters — ``(key, value so far, closed)`` in order — as JSON
    text so far: ``{"k": "v", "n": 3}`` when ``done``. A string parameter's value grows as
    written; any other appears when its parameter closes."""
    out = ["{"]
    for i, (key, raw, closed) in enumerate(params):
        out.append((", " if i else "") + json.dumps(key, ensure_ascii=False) + ": ")
        schema = types.get(key)
        if is_string(schema):
            out.append('"' + _esc(raw) + ('"' if closed or done else ""))
        elif closed or done:
            out.append(json.dumps(typed(raw, schema), ensure_ascii=False))
        else:
            return "".join(out)
        if not closed:
            break
    return "".join(out) + ("}" if done else "")


def types_of(tools, name: str) -> dict:
    """The JSON schemas of tool ``name``'s parameters (empty for a tool not offered)."""
    for t in tools:
        if t.name == name:
            props = t.parameters.get("properties", {}) if isinstance(t.parameters, dict) else {}
            return props if isinstance(props, dict) else {}
    return {}
