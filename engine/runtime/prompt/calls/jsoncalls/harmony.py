"""The OpenAI harmony call family (gpt-oss). A reply, after the generation prompt
``<|start|>assistant``, is messages on channels: thinking on ``analysis``, the answer on
``final``, and a call is a message to ``functions.NAME`` on ``commentary`` with JSON
arguments, as the model writes it::

    <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>

or with the recipient in the role header, as the template renders earlier calls::

    <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>

A later call (or one after the thinking) starts its own message with
``<|start|>assistant``. ``<|call|>`` ends generation in gpt-oss's vocabulary, so a reply
holds one call; a reply cut right after the arguments is still that call.
"""

from __future__ import annotations

import json
import re

from engine.runtime.prompt.calls.base import ToolFormat, _closed, _json_rule, _Scan, bad_json_at, json_args, text_lit
from engine.runtime.prompt.calls.partial import Partial, held

START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL = (
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|end|>",
    "<|call|>",
)
#: the role header of a message the model writes
ROLE = START + "assistant"
RECIPIENT = "to=functions."
#: what opens the answer: the reply parser strips these (the answer runs to ``<|return|>``
#: or ``<|end|>``, or to the end of the reply)
FINAL_HEADERS = (ROLE + CHANNEL + "final" + MESSAGE, CHANNEL + "final" + MESSAGE)
#: what opens the thinking, which runs to ``<|end|>`` (a channel message that names no
#: recipient); the same header with a recipient is a call
ANALYSIS_HEADERS = (ROLE + CHANNEL + "analysis" + MESSAGE, CHANNEL + "analysis" + MESSAGE)
HARMONY_MARKERS = (START, CHANNEL, CONSTRAIN, MESSAGE, END)

#: a call header's beginning: the role, the channel, then the recipient (a bare recipient
#: only with the role, or at the very start of the reply)
_HEAD = re.compile(r"(<\|start\|>assistant)?\s*(<\|channel\|>(?:commentary|analysis)\s*)?to=functions\.")
#: every way a call header begins, for holding back text that may become one
_HEADS = (
    *(f"{role}{CHANNEL}{channel} {RECIPIENT}" for role in (ROLE, "") for channel in ("commentary", "analysis")),
    f"{ROLE} {RECIPIENT}",
)
_NAME_END = re.compile(r"[\s<]")
_WORD = re.compile(r"\w*")


class Harmony(ToolFormat):
    one_call_per_turn = True  # the template renders tool_calls[0] only
    CONTROL_MARKERS = HARMONY_MARKERS

    def __init__(self):
        super().__init__("harmony", "OpenAI harmony (gpt-oss)", f"{CHANNEL}commentary {RECIPIENT}", CALL)

    def detects(self, template):
        return CHANNEL in template and CALL in template and "to=" in template

    def find(self, text):
        for m in _HEAD.finditer(text):
            if m.group(1) or m.group(2):
                return m.start(1) if m.group(1) else m.start(2)
            if not text[: m.start()].strip():
                return m.end() - len(RECIPIENT)
        return -1

    def held(self, text: str) -> int:
        """How many characters at the end of ``text`` may begin a call header (in any of its
        forms; a bare recipient only at the start of the reply): the reply parser holds
        them back from the content."""
        n = max(held(text, h) for h in _HEADS)
        head = text.lstrip()
        return len(text) if head and RECIPIENT.startswith(head) and head != RECIPIENT else n

    def partial(self, text, tools=()):
        out: list[Partial] = []
        pos = end = 0
        while True:
            p, e = _read(text, pos)
            if p is None:
                break
            if e is None or e < 0:
                out.append(p)  # open (or its arguments went wrong: what was sent stays)
                break
            out.append(Partial(p.name, p.args, True))
            pos = end = e
        return out, end

    def write(self, calls):
        return "".join(
            f"{ROLE} {RECIPIENT}{n}{CHANNEL}commentary json{MESSAGE}{json.dumps(a, ensure_ascii=False)}{CALL}"
            for n, a in calls
        )

    def body(self, tools, parallel, lit):
        alts = " | ".join(
            f'{text_lit(t.name + " ")} {lit(CONSTRAIN)} "json" {lit(MESSAGE)} {_json_rule(_closed(t.parameters))}'
            for t in tools
        )
        more = f" ({lit(ROLE)} {lit(self.trigger)} one_call)*" if parallel else ""
        return f"one_call: ({alts}) {lit(CALL)}\ncall_body: one_call{more}\n"


def _expect(text: str, pos: int, lit: str) -> int | None:
    """Past ``lit`` at ``text[pos]``; None: the text ends on a prefix of it; -1: not it."""
    if text.startswith(lit, pos):
        return pos + len(lit)
    return None if lit.startswith(text[pos:]) else -1


def _header(text: str, pos: int) -> tuple[str | None, int | None]:
    """A call header at ``text[pos]``, in either form: the recipient's name and where its
    ``<|message|>`` ends (None: not yet written; -1: not a call header)."""
    s = _Scan(text, pos)
    s.ws()
    i = _expect(text, s.pos, ROLE)
    if i is None:
        return None, None
    s.pos = s.pos if i < 0 else i
    s.ws()
    in_role = _expect(text, s.pos, RECIPIENT)
    if in_role is None:
        return None, None
    if in_role < 0:  # <|channel|>commentary to=functions.NAME
        i = _channel(text, s.pos)
        if i is None or i < 0:
            return None, i
        s.pos = i
        s.ws()
        i = _expect(text, s.pos, RECIPIENT)
        if i is None or i < 0:
            return None, i
        s.pos = i
    else:
        s.pos = in_role
    m = _NAME_END.search(text, s.pos)
    if m is None:
        return None, None
    name, s.pos = text[s.pos : m.start()], m.start()
    if not name:
        return None, -1
    s.ws()
    if in_role >= 0:  # to=functions.NAME<|channel|>commentary
        i = _channel(text, s.pos)
        if i is None or i < 0:
            return None, i
        s.pos = i
    # then the content type: " <|constrain|>json", " json" or nothing
    s.ws()
    i = _expect(text, s.pos, CONSTRAIN)
    if i is None:
        return None, None
    s.pos = max(s.pos, i)
    s.pos = _WORD.match(text, s.pos).end()  # type: ignore[union-attr]
    s.ws()
    i = _expect(text, s.pos, MESSAGE)
    return (name, i) if i is not None and i >= 0 else (None, i)


def _channel(text: str, pos: int) -> int | None:
    """Past ``<|channel|>commentary`` (or ``analysis``) at ``text[pos]``."""
    i = _expect(text, pos, CHANNEL)
    if i is None or i < 0:
        return i
    ends = [_expect(text, i, c) for c in ("commentary", "analysis")]
    return next((e for e in ends if e is not None and e >= 0), None if None in ends else -1)


def _read(text: str, pos: int) -> tuple[Partial | None, int | None]:
    """One call at ``text[pos]``: reported once its header is written and its arguments
    have begun; done at ``<|call|>`` (or at whatever else follows whole arguments)."""
    name, i = _header(text, pos)
    if name is None or i is None:
        return None, i
    args, end = json_args(text, i)
    if not args:
        return None, end
    if end is not None and end < 0:  # named, then not JSON: it ends there, the rest is content
        return Partial(name, args, stop=bad_json_at(text, i)), end
    if end is None:
        return Partial(name, args), end
    s = _Scan(text, end)
    s.ws()
    if s.take(CALL):
        return Partial(name, args), s.pos
    return Partial(name, args), (None if CALL.startswith(text[s.pos :]) else end)


HARMONY = Harmony()
