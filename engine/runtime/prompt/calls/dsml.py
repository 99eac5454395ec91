"""The DeepSeek DSML call family (V3.2, V4): XML-like tags whose names carry ``｜DSML｜``
(fullwidth bars), all inside one block::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="K" string="true">V</｜DSML｜parameter>
    <｜DSML｜parameter name="N" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V3.2's block is ``function_calls``, V4's ``tool_calls``; the rest is the same. A
parameter's ``string`` attribute says how its value is written: ``"true"``, text as is;
``"false"``, JSON (a parameter without it is typed through the tool's schema). A call may
also hold its arguments as one JSON object instead of parameters.
"""

from __future__ import annotations

import json
import re

from engine.runtime.prompt.calls.base import ToolFormat, _json_rule, _Scan, calls_between, json_args, text_lit
from engine.runtime.prompt.calls.partial import Partial, held, is_string, params_json, types_of

DSML = "｜DSML｜"
INVOKE, INVOKE_END = f"<{DSML}invoke", f"</{DSML}invoke>"
PARAM, PARAM_END = f"<{DSML}parameter", f"</{DSML}parameter>"
BLOCKS = ("function_calls", "tool_calls")  # V3.2, V4

_ATTR = re.compile(r"""([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
_DECODER = json.JSONDecoder()


def attrs(head: str) -> dict[str, str]:
    """A tag's attributes, ``name="v"`` (or ``'v'``, or unquoted)."""
    return {m.group(1): next(g for g in m.groups()[1:] if g is not None) for m in _ATTR.finditer(head)}


def upto(rule: str, end: str) -> list[str]:
    """Rules making ``rule`` free text up to and including the grammar literal ``end``
    (:data:`~.base.Lit` output): lazy when ``end`` is text; when it is or holds a special
    token (which text never contains), the text runs to the token, and any text before the
    token is a lazy stop that the text may also go past."""
    if "<[" not in end:
        return [f"{rule}[lazy]: /(?s:.*)/ {end}"]
    if end.startswith("<["):
        return [f"{rule}: /(?s:.*)/ {end}"]
    head, i = _DECODER.raw_decode(end)
    return [f"{rule}_s[lazy]: /(?s:.*)/ {text_lit(head)}", f"{rule}: {rule}_s+ {end[i:].strip()}"]


class Dsml(ToolFormat):
    CONTROL_MARKERS = (INVOKE, INVOKE_END, PARAM, PARAM_END,
                       *(f"<{DSML}{b}>" for b in BLOCKS), *(f"</{DSML}{b}>" for b in BLOCKS))  # fmt: skip

    def __init__(self, block: str = "function_calls"):
        v4 = block == "tool_calls"
        super().__init__("dsml-v4" if v4 else "dsml", f"DeepSeek {'V4' if v4 else 'V3.2'} DSML", f"<{DSML}{block}>",
                         INVOKE_END)  # fmt: skip

    @property
    def block(self) -> str:
        return self.trigger[len(DSML) + 1 : -1]

    @property
    def end(self) -> str:
        return f"</{DSML}{self.block}>"

    def detects(self, template):
        # the templates build the tags from a variable: '<' + dsml_token + 'function_calls>'
        return DSML in template and f"{self.block}>" in template

    def partial(self, text, tools=()):
        return calls_between(text, INVOKE, INVOKE_END, lambda t, pos: _read(t, pos, tools), first=self.trigger,
                             last=self.end)  # fmt: skip

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(
                f'{PARAM} name="{k}" string="true">{v}{PARAM_END}\n' if isinstance(v, str)
                else f'{PARAM} name="{k}" string="false">{json.dumps(v, ensure_ascii=False)}{PARAM_END}\n'
                for k, v in args.items())  # fmt: skip
            empty = "\n" if not args and self.block == "tool_calls" else ""  # V4 writes an empty line
            out.append(f'{INVOKE} name="{name}">\n{params}{empty}{INVOKE_END}\n')
        return f"{self.trigger}\n{''.join(out)}{self.end}"

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            props = t.parameters.get("properties", {}) or {}
            required = set(t.parameters.get("required", []) or [])
            parts = []
            for j, (k, sch) in enumerate(props.items()):
                rule, close = f"p{i}_{j}", f'{lit(PARAM_END)} "\\n"'
                head = f"{lit(PARAM)} {text_lit(f' name={json.dumps(k, ensure_ascii=False)} string=')}"
                if is_string(sch) and "enum" in sch:
                    values = " | ".join(text_lit(v) for v in sch["enum"])
                    rules.append(f'{rule}: {head} "\\"true\\">" ({values}) {close}')
                elif is_string(sch):
                    rules.extend(upto(f"{rule}_v", lit(PARAM_END)))
                    rules.append(f'{rule}: {head} "\\"true\\">" {rule}_v "\\n"')
                else:
                    rules.append(f'{rule}: {head} "\\"false\\">" {_json_rule(sch if isinstance(sch, dict) else {})} '
                                 f"{close}")  # fmt: skip
                parts.append(rule if k in required else f"{rule}?")
            name = text_lit(f" name={json.dumps(t.name, ensure_ascii=False)}>\n")
            rules.append(f"f{i}: {lit(INVOKE)} {name} {' '.join(parts)} {lit(INVOKE_END)}")
            fns.append(f"f{i}")
        rules.append(f"one_call: {' | '.join(fns)}")
        many = ' ("\\n" one_call)*' if parallel else ""
        return f'call_body: "\\n" one_call{many} "\\n" {lit(self.end)}\n' + "\n".join(rules) + "\n"


def _read(text: str, pos: int, tools) -> tuple[Partial | None, int | None]:
    """`` name="NAME">`` then parameters (or one JSON object) up to ``</｜DSML｜invoke>``.
    Once the name is whole the call stays (what was sent is never taken back): a body
    that goes wrong leaves it open, with its arguments as far as they were good."""
    s = _Scan(text, pos)
    head = s.until(">")
    if head is None:
        return None, None
    name = attrs(head).get("name", "").strip()
    if not name:
        return None, -1
    types, params = dict(types_of(tools, name)), []
    s.ws()
    if text.startswith("{", s.pos):  # the arguments as one JSON object
        args, end = json_args(text, s.pos)
        return Partial(name, args), (end if end is not None and end >= 0 else None)
    while True:
        s.ws()
        if text.startswith(INVOKE_END, s.pos):
            return Partial(name, params_json(params, types, True)), s.pos
        so_far = Partial(name, params_json(params, types, False))
        if not s.take(PARAM):
            return so_far, None  # more to come, or not a parameter: open
        head = s.until(">")
        key = attrs(head).get("name") if head is not None else None
        if key is None:
            return so_far, None
        kind = attrs(head).get("string", "").strip().lower()
        if kind in ("true", "false"):
            types[key] = {"type": "string"} if kind == "true" else {}
        close = text.find(PARAM_END, s.pos)
        if close < 0:
            value = text[s.pos :]
            params.append((key, value[: len(value) - held(value, PARAM_END)], False))
            return Partial(name, params_json(params, types, False)), None
        params.append((key, text[s.pos : close], True))
        s.pos = close + len(PARAM_END)


DSML_V32 = Dsml("function_calls")
DSML_V4 = Dsml("tool_calls")
