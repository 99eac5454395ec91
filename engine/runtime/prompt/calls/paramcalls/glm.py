"""The GLM call family: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>``,
one argument after another (GLM-4.5/4.6 and Ling 3 put newlines between the markers,
GLM-4.7 none); Hy3 writes the same with its own markers (:mod:`.hy3`).

A value is written as is: a string parameter's value is taken as written, any other is
JSON (typed through the tool's JSON schema). The three templates render a call with
different whitespace, so each has its format (for :meth:`~.base.ToolFormat.write`); all
three parse any of the three and are constrained by one grammar that lets the model
write its own whitespace.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.runtime.prompt.calls.base import Lit, ToolFormat, _json_rule, _repeat, _Scan, calls_between, text_lit
from engine.runtime.prompt.calls.partial import Partial, held, is_string, params_json, types_of
from engine.runtime.prompt.tools import Tool

GLM_MARKERS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")

#: a whole tool name, and one as far as it is written (whitespace around it aside)
_NAME = re.compile(r"[^\s<>{}\"']+")
_NAME_SO_FAR = re.compile(r"\s*[^\s<>{}\"']*\s*")
_NL = '"\\n"?'


@dataclass(frozen=True)
class ArgSyntax:
    """The markers of a call written as ``NAME [name_end] (key K key_end value V value_end)* close``."""

    key: str = "<arg_key>"
    key_end: str = "</arg_key>"
    value: str = "<arg_value>"
    value_end: str = "</arg_value>"
    close: str = "</tool_call>"
    #: the marker after the name ("": the name ends where the first marker begins)
    name_end: str = ""


def read_arg_call(text: str, pos: int, tools, m: ArgSyntax) -> tuple[Partial | None, int | None]:
    """One call's body at ``text[pos]`` (after its opener) up to and with its closer. The
    call is reported once its name is followed by a whole key marker or the closer. Text
    that cannot continue the call after that closes it where the text begins (it is
    then content), so a call once reported is never taken back."""
    if m.name_end:
        i = text.find(m.name_end, pos)
        head = text[pos:] if i < 0 else text[pos:i]
        if i < 0:
            head = head[: len(head) - held(head, m.name_end)]
        after = len(text) if i < 0 else i + len(m.name_end)
    else:
        i = text.find("<", pos)
        head = text[pos:] if i < 0 else text[pos:i]
        after = len(text) if i < 0 else i
    if not _NAME_SO_FAR.fullmatch(head):
        return None, -1
    if i < 0:
        return None, None
    name = head.strip()
    if not _NAME.fullmatch(name):
        return None, -1
    s = _Scan(text, after)
    s.ws()
    rest = text[s.pos :]
    if not rest.startswith((m.key, m.close)):
        return None, (None if m.key.startswith(rest) or m.close.startswith(rest) else -1)
    types, params = types_of(tools, name), []
    while True:
        s.ws()
        mark = s.pos  # where text that is not part of the call would begin
        if s.take(m.close):
            return Partial(name, params_json(params, types, True)), s.pos
        if s.take(m.key):
            k_end = text.find(m.key_end, s.pos)
            key = text[s.pos :] if k_end < 0 else text[s.pos : k_end]
            if "<" in (key[: len(key) - held(key, m.key_end)] if k_end < 0 else key) or ">" in key:
                return Partial(name, params_json(params, types, True)), mark
            if k_end < 0:
                return Partial(name, params_json(params, types, False)), None
            s.pos = k_end + len(m.key_end)
            s.ws()
            if not s.take(m.value):
                if m.value.startswith(text[s.pos :]):
                    return Partial(name, params_json(params, types, False)), None
                return Partial(name, params_json(params, types, True)), mark
            v_end = text.find(m.value_end, s.pos)
            if v_end < 0:
                value = text[s.pos :]
                params.append((key.strip(), value[: len(value) - held(value, m.value_end)], False))
                return Partial(name, params_json(params, types, False)), None
            params.append((key.strip(), text[s.pos : v_end], True))
            s.pos = v_end + len(m.value_end)
            continue
        rest = text[s.pos :]
        if m.key.startswith(rest) or m.close.startswith(rest):
            return Partial(name, params_json(params, types, False)), None
        return Partial(name, params_json(params, types, True)), mark


def arg_rules(tools: tuple[Tool, ...], lit: Lit, m: ArgSyntax) -> tuple[list[str], list[str]]:
    """Grammar rules for the calls' bodies (after the opener, up to and with the closer):
    the rules and the rule of each tool's call. Arguments come in the schema's order,
    the required ones always; a newline may sit between the markers."""
    rules, fns = [], []
    for i, t in enumerate(tools):
        params = t.parameters if isinstance(t.parameters, dict) else {}
        props = params.get("properties", {}) or {}
        required = set(params.get("required", []) or [])
        parts = []
        for j, (k, sch) in enumerate(props.items()):
            rule, end = f"a{i}_{j}", lit(m.value_end)
            head = f"{lit(m.key)} {text_lit(k)} {lit(m.key_end)} {_NL} {lit(m.value)}"
            if is_string(sch) and "enum" in sch:
                rules.append(f"{rule}: {head} ({' | '.join(text_lit(v) for v in sch['enum'])}) {end} {_NL}")
            elif is_string(sch):
                most = sch.get("maxLength")
                body = f"/(?s:.){{0,{int(most)}}}/" if isinstance(most, int) else "/(?s:.*)/"
                # free text up to the end marker: the first one, when the marker is text
                rules.append(f"{rule}_v{'' if end.startswith('<[') else '[lazy]'}: {body} {end}")
                rules.append(f"{rule}: {head} {rule}_v {_NL}")
            else:
                rules.append(f"{rule}: {head} {_json_rule(sch if isinstance(sch, dict) else {})} {end} {_NL}")
            parts.append(rule if k in required else f"{rule}?")
        name = f"{text_lit(t.name)}" + (f" {lit(m.name_end)}" if m.name_end else "")
        rules.append(f"f{i}: {name} {_NL} {' '.join(parts)} {lit(m.close)}")
        fns.append(f"f{i}")
    return rules, fns


@dataclass(frozen=True)
class _Layout:
    """How a template writes a call: after the name, each argument, before the closer,
    and between calls."""

    head: str
    arg: str
    tail: str
    sep: str


_LAYOUTS = {
    # GLM-4.5/4.6: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>
    "glm": _Layout("\n", "<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n", "", "\n"),
    # GLM-4.7: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
    "glm-4.7": _Layout("", "<arg_key>{k}</arg_key><arg_value>{v}</arg_value>", "", ""),
    # Ling 3: <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>
    "ling": _Layout("\n", "<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>", "\n", "\n"),
}
_LABELS = {"glm": "GLM-4.5/4.6 <arg_key>", "glm-4.7": "GLM-4.7 <arg_key>", "ling": "Ling 3 <arg_key>"}


def value_text(v) -> str:
    """An argument's value as the templates write it: a string as is, else JSON."""
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


class Glm(ToolFormat):
    """``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`` (GLM-4.5/4.6/4.7,
    Ling 3; each ``name`` is one template's whitespace)."""

    CONTROL_MARKERS = GLM_MARKERS
    SYNTAX = ArgSyntax()

    def __init__(self, name: str = "glm"):
        super().__init__(name, _LABELS[name], "<tool_call>", "</tool_call>")

    def detects(self, template):
        if not all(m in template for m in ("<tool_call>", "<arg_key>", "<arg_value>")):
            return False
        if ("<role>ASSISTANT</role>" in template) != (self.name == "ling"):  # Bailing's role sections
            return False
        # GLM-4.7 (and Spark 2.5, Laguna S 2.1) write the markers with no newline between
        # them; GLM-4.5/4.6 (and Laguna XS) with one
        spaced = "</arg_key>\n" in template or "</arg_key>\\n" in template  # a newline, or one in a string
        return self.name == "ling" or spaced != (self.name == "glm-4.7")

    def partial(self, text, tools=()):
        return calls_between(text, self.trigger, "", lambda t, pos: read_arg_call(t, pos, tools, self.SYNTAX))

    def write(self, calls):
        lay = _LAYOUTS[self.name]
        return lay.sep.join(
            f"{self.trigger}{n}{lay.head}"
            + "".join(lay.arg.format(k=k, v=value_text(v)) for k, v in a.items())
            + f"{lay.tail}{self.call_end}"
            for n, a in calls
        )

    def body(self, tools, parallel, lit):
        rules, fns = arg_rules(tools, lit, self.SYNTAX)
        rules.append(f"one_call: {' | '.join(fns)}")
        return _repeat("one_call", f"WS {lit(self.trigger)}", parallel) + "\n".join(rules) + "\n"


GLM = Glm()
GLM47 = Glm("glm-4.7")
LING = Glm("ling")
