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

from engine.runtime.prompt.calls.base import (
    ToolFormat,
    _Scan,
    calls_between,
    json_args,
    param_rules,
    params_of,
    text_lit,
)
from engine.runtime.prompt.calls.partial import Partial, held, params_json, types_of

DSML = "｜DSML｜"
INVOKE, INVOKE_END = f"<{DSML}invoke", f"</{DSML}invoke>"
PARAM, PARAM_END = f"<{DSML}parameter", f"</{DSML}parameter>"
BLOCKS = ("function_calls", "tool_calls")  # V3.2, V4

_ATTR = re.compile(r"""([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
_DECODER = json.JSONDecoder()


def attrs(head: str) -> dict[str, str]:
    """A tag's attributes, ``name="v"`` (or ``'v'``, or unquoted)."""
    return {m.group(1): next(g for g in m.groups()[1:] if g is not None) for m in _ATTR.finditer(head)}


class Dsml(ToolFormat):
    CONTROL_MARKERS = (
        INVOKE,
        INVOKE_END,
        PARAM,
        PARAM_END,
        *(f"<{DSML}{b}>" for b in BLOCKS),
        *(f"</{DSML}{b}>" for b in BLOCKS),
    )

    def __init__(self, block: str = "function_calls"):
        v4 = block == "tool_calls"
        super().__init__(
            "dsml-v4" if v4 else "dsml", f"DeepSeek {'V4' if v4 else 'V3.2'} DSML", f"<{DSML}{block}>", INVOKE_END
        )

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
        read = lambda t, pos: read_invoke(t, pos, tools, PARAM, PARAM_END, INVOKE_END, json_ok=True)  # noqa: E731
        return calls_between(text, INVOKE, "", read, first=self.trigger, last=self.end)

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(
                f'{PARAM} name="{k}" string="true">{v}{PARAM_END}\n'
                if isinstance(v, str)
                else f'{PARAM} name="{k}" string="false">{json.dumps(v, ensure_ascii=False)}{PARAM_END}\n'
                for k, v in args.items()
            )
            empty = "\n" if not args and self.block == "tool_calls" else ""  # V4 writes an empty line
            out.append(f'{INVOKE} name="{name}">\n{params}{empty}{INVOKE_END}\n')
        return f"{self.trigger}\n{''.join(out)}{self.end}"

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            parts = []
            for j, (k, sch, required) in enumerate(params_of(t)):
                rule = f"p{i}_{j}"
                head = f"{lit(PARAM)} {text_lit(f' name={json.dumps(k, ensure_ascii=False)} string=')}"
                rules.extend(
                    param_rules(
                        rule, head, sch, lit(PARAM_END), '"\\n"', as_text='"\\"true\\">"', as_json='"\\"false\\">"'
                    )
                )
                parts.append(rule if required else f"{rule}?")
            name = text_lit(f" name={json.dumps(t.name, ensure_ascii=False)}>\n")
            rules.append(f"f{i}: {lit(INVOKE)} {name} {' '.join(parts)} {lit(INVOKE_END)}")
            fns.append(f"f{i}")
        rules.append(f"one_call: {' | '.join(fns)}")
        many = ' ("\\n" one_call)*' if parallel else ""
        return f'call_body: "\\n" one_call{many} "\\n" {lit(self.end)}\n' + "\n".join(rules) + "\n"


def read_invoke(
    text: str, pos: int, tools, param: str, param_end: str, close: str, strip: bool = False, json_ok: bool = False
) -> tuple[Partial | None, int | None]:
    """One call's body after its opener, `` name="NAME">`` then ``{param} name="K" …>V{param_end}``
    … up to and with ``close`` (``strip``: values trimmed of surrounding whitespace;
    ``json_ok``: the arguments may be one JSON object instead). The call is reported once
    its name is followed by a parameter, the closer (or the JSON); text that cannot
    continue it after that closes it where the text begins (it is then content), so a
    call once reported is never taken back."""
    s = _Scan(text, pos)
    head = s.until(">")
    if head is None:
        return None, None
    name = attrs(head).get("name", "").strip()
    s.ws()
    rest = text[s.pos :]
    starts = (param, close, "{") if json_ok else (param, close)
    if not name or not rest.startswith(starts):
        return None, (None if name and any(m.startswith(rest) for m in starts) else -1)
    types, params = dict(types_of(tools, name)), []
    if rest.startswith("{"):  # the arguments as one JSON object
        args, end = json_args(text, s.pos)
        if end is None or end < 0:
            return Partial(name, args), None
        s.pos = end
        s.ws()
        if s.take(close):
            return Partial(name, args), s.pos
        return Partial(name, args), (None if close.startswith(text[s.pos :]) else end)
    while True:
        s.ws()
        mark = s.pos  # where text that is not part of the call would begin
        if s.take(close):
            return Partial(name, params_json(params, types, True)), s.pos
        if not s.take(param):
            rest = text[s.pos :]
            if param.startswith(rest) or close.startswith(rest):
                return Partial(name, params_json(params, types, False)), None
            return Partial(name, params_json(params, types, True)), mark
        head = s.until(">")
        if head is None:
            return Partial(name, params_json(params, types, False)), None
        key = attrs(head).get("name")
        if key is None:
            return Partial(name, params_json(params, types, True)), mark
        kind = attrs(head).get("string", "").strip().lower()
        if kind in ("true", "false"):  # DSML says how the value is written
            types[key] = {"type": "string"} if kind == "true" else {}
        end = text.find(param_end, s.pos)
        if end < 0:
            value = text[s.pos :]
            value = value[: len(value) - held(value, param_end)]
            params.append((key, value.strip() if strip else value, False))
            return Partial(name, params_json(params, types, False)), None
        value = text[s.pos : end]
        params.append((key, value.strip() if strip else value, True))
        s.pos = end + len(param_end)


DSML_V32 = Dsml("function_calls")
DSML_V4 = Dsml("tool_calls")
