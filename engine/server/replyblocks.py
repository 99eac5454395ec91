"""A streamed reply as an ordered list of blocks — thinking, text, tool calls — each
started, grown and stopped, the shape the Responses and Messages APIs stream in.

The engine already splits a reply as it is generated (:class:`~engine.runtime.jobs.Tokens`
``parts``, from the template's own thinking markers and call format); this turns those
parts into block events, one open block at a time: a thinking block while the reply
thinks, a text block for its answer, one block per tool call (started with its name and
id as soon as the name is written, its arguments as deltas as they are written, stopped
when the call closes). Each API module only says how a block event is written on its wire.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.runtime import jobs as J
from engine.runtime.prompt.reply import CALL, CALL_ARGS, CALL_START, CONTENT, REASONING
from engine.runtime.prompt.tools import ToolCall

THINKING, TEXT, TOOL = "thinking", "text", "tool"
START, DELTA, STOP = "start", "delta", "stop"


@dataclass
class Block:
    kind: str  # THINKING | TEXT | TOOL
    index: int  # its place among the reply's blocks
    call: ToolCall | None = None
    text: str = ""  # everything its deltas said


@dataclass(frozen=True)
class BlockEvent:
    what: str  # START | DELTA | STOP
    block: Block
    delta: str = ""


class Blocks:
    """Block events of one reply, fed the engine's Tokens events in order."""

    def __init__(self):
        self.blocks: list[Block] = []
        self._open: Block | None = None
        self._calls: dict[int, Block] = {}  # a call's index in the reply -> its block

    def feed(self, ev: J.Tokens) -> list[BlockEvent]:
        out: list[BlockEvent] = []
        if ev.parts is None:
            self._grow(out, TEXT, ev.text)
            return out
        for p in ev.parts:
            if p.kind == REASONING:
                self._grow(out, THINKING, p.text)
            elif p.kind == CONTENT:
                self._grow(out, TEXT, p.text)
            elif p.kind == CALL_START:
                self._close(out)
                self._calls[p.index] = self._start(out, TOOL, p.call)
            elif p.kind == CALL_ARGS:
                b = self._calls[p.index]
                b.text += p.text
                out.append(BlockEvent(DELTA, b, p.text))
            elif p.kind == CALL and p.call is not None:
                b = self._calls.get(p.index) or self._start(out, TOOL, p.call)
                if p.call.arguments != b.text:  # a call that arrived whole (not streamed)
                    out.append(BlockEvent(DELTA, b, p.call.arguments[len(b.text) :]))
                b.call, b.text = p.call, p.call.arguments
                if self._open is b:
                    self._close(out)
        return out

    def finish(self) -> list[BlockEvent]:
        out: list[BlockEvent] = []
        self._close(out)
        return out

    @property
    def calls(self) -> list[ToolCall]:
        return [b.call for b in self.blocks if b.call is not None]

    def _grow(self, out: list[BlockEvent], kind: str, text: str) -> None:
        if not text:
            return
        if self._open is None or self._open.kind != kind:
            self._close(out)
            self._start(out, kind)
        assert self._open is not None
        self._open.text += text
        out.append(BlockEvent(DELTA, self._open, text))

    def _start(self, out: list[BlockEvent], kind: str, call: ToolCall | None = None) -> Block:
        b = Block(kind, len(self.blocks), call)
        self.blocks.append(b)
        self._open = b
        out.append(BlockEvent(START, b))
        return b

    def _close(self, out: list[BlockEvent]) -> None:
        if self._open is not None:
            out.append(BlockEvent(STOP, self._open))
            self._open = None
