"""Where the decode loop's output goes: the submitter's callback, and the reply's own
splitter telling the loop whether the reply is still thinking.

The loop never parses a reply. A chat reply is split into thinking, content and tool
calls by one parser (:class:`~engine.runtime.prompt.reply.ReplyParser`, the engine's):
the :class:`Emitter` feeds it every emitted piece of text, hands its parts to the
submitter with the text, and counts as thinking the tokens emitted until it leaves the
think block — the count and the rounds marked as thinking come from the parser's own
state, not from a second look for the end marker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from engine.runtime.decode.logprobs import TokenLogprob
from engine.runtime.decode.stats import RoundStats

#: (tokens, their text, their log-probabilities or None, the reply's parts or None)
EmitFn = Callable[[list[int], str, "list[TokenLogprob] | None", "Sequence[Any] | None"], None]
RoundFn = Callable[[RoundStats], None]


class Splitter(Protocol):
    """A reply's parser as the loop sees it (:class:`~engine.runtime.prompt.reply.ReplyParser`)."""

    def feed(self, text: str) -> list[Any]: ...

    @property
    def in_thinking(self) -> bool: ...

    #: offset into the text fed so far just past the think block's end (None: not ended)
    think_end: int | None


class Emitter:
    """Hands a generation's output on, split when there is a splitter. One per
    generation; engine thread only."""

    def __init__(self, on_emit: EmitFn | None, splitter: Splitter | None, piece: Callable[[int], bytes]):
        self.on_emit = on_emit
        self.splitter = splitter
        self.piece = piece
        #: the reply is inside its think block (its rounds count as thinking)
        self.thinking = splitter is not None and splitter.in_thinking
        #: tokens emitted while thinking, the marker that ends it included
        self.thinking_tokens = 0
        self._fed = 0  # characters fed to the splitter so far

    def emit(self, tokens: list[int], text: str, lps: list[TokenLogprob] | None = None) -> None:
        parts = None
        if self.splitter is not None and (tokens or text):
            was_thinking, start = self.thinking, self._fed
            parts = self.splitter.feed(text)
            self._fed += len(text)
            if was_thinking:
                self._count_thinking(tokens, start)
        if self.on_emit is not None and (tokens or text or parts):
            self.on_emit(tokens, text, lps, parts)

    def _count_thinking(self, tokens: list[int], start: int) -> None:
        s = self.splitter
        assert s is not None
        if s.in_thinking:
            self.thinking_tokens += len(tokens)
            return
        self.thinking = False
        end = s.think_end if s.think_end is not None else start
        # the tokens that begin before the block's end are thinking (the one completing
        # the marker too)
        done, n = start, 0
        for t in tokens:
            if done >= end:
                break
            done += len(self.piece(t).decode("utf-8", "replace"))
            n += 1
        self.thinking_tokens += n
