"""A reply's text split as it streams: thinking, content and tool calls.

:class:`ReplyParser` is fed the generated text piece by piece (as the engine emits it)
and returns :class:`Part` s: thinking text until the template's end marker, then content,
then tool calls in the template's format, each as soon as it is complete. Text that
might be the start of a marker is held back until it is clear, so no marker ever
reaches the content. Calls that do not parse are content: a model's malformed call is
its answer, never an error. The same parser serves the endpoint and the chat page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.runtime.prompt.calls import ToolFormat
from engine.runtime.prompt.calls.partial import closing
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.tools import Tool, ToolCall, new_call_id

REASONING, CONTENT, CALL = "reasoning", "content", "call"
#: a call streams as CALL_START (its name and id), CALL_ARGS pieces (its arguments' JSON
#: text as written), then CALL (the whole call: its arguments are the pieces joined)
CALL_START, CALL_ARGS = "call_start", "call_args"
#: what a JSON-call reply (Llama 3, generic) may start with
_JSON_OPENERS = ("{", "<|python_tag|>")


@dataclass(frozen=True)
class Part:
    kind: str  # REASONING | CONTENT | CALL_START | CALL_ARGS | CALL
    text: str = ""
    call: ToolCall | None = None
    index: int = 0  # the call's index in the reply


def joined_parts(a: tuple[Part, ...], b: tuple[Part, ...]) -> tuple[Part, ...]:
    """The parts of two consecutive pieces of a reply as those of one: where ``a`` ends
    and ``b`` begins with text of the same kind (thinking, content, one call's arguments)
    the two are one part."""
    if not a or not b:
        return a + b
    p, q = a[-1], b[0]
    if p.kind == q.kind and (p.kind in (REASONING, CONTENT) or (p.kind == CALL_ARGS and p.index == q.index)):
        return (*a[:-1], Part(p.kind, p.text + q.text, None, p.index), *b[1:])
    return a + b


@dataclass
class Reply:
    """A whole reply, split."""

    reasoning: str = ""
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    #: it ended inside a call, cut short: that call's arguments are as far as they were
    #: written, and no client may run it (jobs.Ending.CUT)
    unfinished: bool = False

    def add(self, parts: list[Part]) -> None:
        for p in parts:
            if p.kind == REASONING:
                self.reasoning += p.text
            elif p.kind == CONTENT:
                self.content += p.text
            elif p.kind == CALL and p.call is not None:
                self.calls.append(p.call)


def _held(buf: str, marker: str) -> int:
    """How many characters at the end of ``buf`` could begin ``marker``."""
    for n in range(min(len(marker) - 1, len(buf)), 0, -1):
        if marker.startswith(buf[-n:]):
            return n
    return 0


class ReplyParser:
    """Incremental splitter for one reply.

    ``thinking``: the template's markers (None: no split; ``reasoning_format: none``);
    ``in_thinking``: the prompt left a think block open; ``fmt``/``tools``: parse calls in
    this format (None: the reply is content)."""

    def __init__(
        self,
        thinking: Thinking | None = None,
        in_thinking: bool = False,
        fmt: ToolFormat | None = None,
        tools: tuple[Tool, ...] = (),
    ):
        self.thinking = thinking
        self.fmt = fmt
        self.tools = tools
        # "start": may still open a think block; "think"; "content"; "calls"
        self.state = (
            "think" if (thinking is not None and in_thinking) else ("start" if thinking is not None else "content")
        )
        self.buf = ""
        self.lead = True  # strip whitespace at the start of content
        self.calls: list[ToolCall] = []  # closed calls
        self._streaming: list[list] = []  # per call: [id, name, arguments sent, closed]
        self._gap = ""  # the whitespace between the content and the calls' opener
        self._think_lead = True  # at the start of the thinking
        self._cut = True  # the reply ended by its length (set by finish)
        self.reply = Reply()
        #: characters fed so far, and the offset just past the think block's end marker
        #: once it is seen (the decode loop counts thinking tokens by it)
        self.fed = 0
        self.think_end: int | None = None

    # ------------------------------------------------------------------ feed
    def feed(self, text: str) -> list[Part]:
        self.buf += text
        self.fed += len(text)
        out: list[Part] = []
        while True:
            before = (self.state, len(self.buf))
            self._step(out, final=False)
            if (self.state, len(self.buf)) == before:
                break
        self.reply.add(out)
        return out

    def finish(self, cut: bool = True) -> list[Part]:
        """The parts the reply's end releases. ``cut``: it ended by its length (a call still
        open keeps its arguments as written); else an open call is closed as broken (its
        arguments made to parse)."""
        self._cut = cut
        out: list[Part] = []
        for _ in range(4):
            self._step(out, final=True)
        if self.state == "calls" and self.buf:
            at = self._stream_calls(out, final=True)
            rest = "" if at is None else (self.buf[at:] if self.calls else self.buf)
            if rest.strip():
                if not self.calls or at == 0:  # no call read, or none before this text: it follows the content
                    rest = self._gap + rest if self.reply.content else rest.lstrip()
                self._emit(out, CONTENT, rest)
            self.buf = ""
        self.reply.add(out)
        return out

    @property
    def in_thinking(self) -> bool:
        return self.state == "think"

    # ----------------------------------------------------------------- steps
    def _step(self, out: list[Part], final: bool) -> None:
        if self.state == "start":
            assert self.thinking is not None
            stripped = self.buf.lstrip()
            if stripped.startswith(self.thinking.start):
                self.buf = stripped[len(self.thinking.start) :]
                self.state = "think"
            elif final or (stripped and not self.thinking.start.startswith(stripped)):
                self.state = "content"
        elif self.state == "think":
            assert self.thinking is not None
            if self._think_lead:  # newlines right after the start marker are not thinking
                self.buf = self.buf.lstrip("\n")
                if not self.buf and not final:
                    return
                self._think_lead = False
            i = self.buf.find(self.thinking.end)
            if i >= 0:
                self._emit(out, REASONING, self.buf[:i].rstrip("\n") if i else "")
                self.buf = self.buf[i + len(self.thinking.end) :]
                self.state = "content"
                self.lead = True
                self.think_end = self.fed - len(self.buf)
            else:
                keep = 0
                if not final:  # what may begin the end marker, and newlines that may precede it
                    keep = _held(self.buf, self.thinking.end)
                    body = self.buf[: len(self.buf) - keep]
                    keep += len(body) - len(body.rstrip("\n"))
                self._emit(out, REASONING, self.buf[: len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep :]
        elif self.state == "content":
            if self.lead:
                self.buf = self.buf.lstrip()
                if not self.buf:
                    return
                if self.thinking is not None and (self.thinking.answer_headers or self.thinking.again):
                    for h in self.thinking.again:  # harmony: another analysis message
                        if self.buf.startswith(h):
                            self.buf = self.buf[len(h) :]
                            self.state, self._think_lead = "think", True
                            if self.reply.reasoning or any(p.kind == REASONING for p in out):
                                self._emit(out, REASONING, "\n\n")  # one message from the next
                            return
                    for h in self.thinking.answer_headers:  # harmony's final channel
                        if self.buf.startswith(h):
                            self.buf = self.buf[len(h) :]
                            return
                    heads = (*self.thinking.answer_headers, *self.thinking.again)
                    if not final and any(h.startswith(self.buf) for h in heads):
                        return  # may still become a header
                self.lead = False
            markers = self.thinking.answer_markers if self.thinking is not None else ()
            if self.fmt is None:
                keep = 0 if final else max((_held(self.buf, m) for m in markers), default=0)
                self._emit(out, CONTENT, self.buf[: len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep :]
                return
            i = self.fmt.find(self.buf)
            if i >= 0:
                head = self.buf[:i].rstrip()
                self._emit(out, CONTENT, head)
                self._gap = self.buf[len(head) : i]  # content again if no call follows
                self.buf = self.buf[i:]
                self.state = "calls"
            elif not self.fmt.trigger:  # JSON calls: only a reply that starts with one
                head = self.buf.lstrip()
                if final or not any(m.startswith(head) for m in _JSON_OPENERS):
                    self._emit(out, CONTENT, self.buf)
                    self.buf = ""
                    self.fmt = None
            else:
                # hold back what may begin the opening marker, and trailing whitespace (it
                # belongs to the content only if more content follows)
                keep = 0
                if not final:
                    keep = max([self.fmt.held(self.buf), *(_held(self.buf, m) for m in markers)])
                    keep += len(self.buf[: len(self.buf) - keep]) - len(self.buf[: len(self.buf) - keep].rstrip())
                self._emit(out, CONTENT, self.buf[: len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep :]
        elif self.state == "calls" and not final:
            self._stream_calls(out, final=False)

    def _stream_calls(self, out: list[Part], final: bool) -> int | None:
        """Parts for what the calls so far add: a new call's start, its arguments' new
        text, its close. A call also closes, with its arguments as far as they were
        written, when its text stops being well formed (``Partial.stop``), when the format
        no longer reads it, or (``final``) when the reply ends inside it (cut by
        ``max_tokens``). Returns where the text that is content after the calls begins
        (None: none is)."""
        assert self.fmt is not None
        parts, end = self.fmt.partial(self.buf, self.tools)
        rest: int | None = end
        for i, p in enumerate(parts):
            if i == len(self._streaming):
                self._streaming.append([new_call_id(), p.name, "", False])
                out.append(Part(CALL_START, call=ToolCall(p.name, "", self._streaming[i][0]), index=i))
            if p.args.startswith(self._streaming[i][2]):
                self._grow(out, i, p.args)
            if p.stop is not None:
                rest = p.stop
                self._close(out, i, broken=True)
            elif p.done:
                self._close(out, i)
            elif final:
                rest = None
                self.reply.unfinished = self.reply.unfinished or self._cut
                self._close(out, i, broken=not self._cut)
        for i in range(len(parts), len(self._streaming)):  # read no more: it ends as it stands
            self._close(out, i, broken=True)
        return rest

    def _grow(self, out: list[Part], i: int, args: str) -> None:
        rec = self._streaming[i]
        if not rec[3] and len(args) > len(rec[2]):
            out.append(Part(CALL_ARGS, args[len(rec[2]) :], index=i))
            rec[2] = args

    def _close(self, out: list[Part], i: int, broken: bool = False) -> None:
        """Close call ``i``. A ``broken`` one (its text stopped being a call) gets arguments
        that parse, added to what was sent; one cut by the reply's end keeps them as far as
        they were written, as OpenAI does at a length cut (a tool must not take a cut value
        for a whole one)."""
        rec = self._streaming[i]
        if rec[3]:
            return
        if not rec[2]:  # named, no arguments written: an empty object, never ""
            self._grow(out, i, "{}")
        elif broken:
            self._grow(out, i, rec[2] + closing(rec[2]))
        rec[3] = True
        call = ToolCall(rec[1], rec[2], rec[0])
        out.append(Part(CALL, call=call, index=i))
        self.calls.append(call)

    def _emit(self, out: list[Part], kind: str, text: str) -> None:
        if kind == CONTENT and self.thinking is not None:  # Cohere's <|START_TEXT|> … <|END_TEXT|>
            for m in self.thinking.answer_markers:
                text = text.replace(m, "")
        if text:
            out.append(Part(kind, text))


def split(
    text: str,
    thinking: Thinking | None = None,
    in_thinking: bool = False,
    fmt: ToolFormat | None = None,
    tools: tuple[Tool, ...] = (),
) -> Reply:
    """A whole reply's text split at once."""
    p = ReplyParser(thinking, in_thinking, fmt, tools)
    p.feed(text)
    p.finish()
    return p.reply
