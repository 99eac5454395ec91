"""Turning generated tokens into text, and deciding when to stop.

Tokens arrive one at a time; their bytes are decoded incrementally (a character may span
tokens). Text that could still turn out to be the start of a stop string is held back
until it can't; when a stop string completes, nothing at or past it is emitted. The
same checker serves plain and speculative decoding, so both stop at the same token.
"""

from __future__ import annotations

import codecs
import enum
from collections.abc import Callable
from dataclasses import dataclass


class StopReason(enum.StrEnum):
    """Why a generation ended: the one vocabulary from the decoder to every client."""

    EOG = "eog"  # the model's end of generation (or a chat template's end of turn)
    MAX_TOKENS = "max_tokens"
    STOP_STRING = "stop_string"
    CANCELLED = "cancelled"
    CONTEXT_FULL = "context_full"

    @property
    def finish_reason(self) -> str:
        """OpenAI's ``finish_reason``."""
        return _FINISH_REASON[self]


#: the one table from stop reason to OpenAI's finish_reason ("length": cut short)
_FINISH_REASON = {
    StopReason.EOG: "stop",
    StopReason.STOP_STRING: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTEXT_FULL: "length",
    StopReason.CANCELLED: "length",
}


@dataclass
class Pushed:
    """Result of offering one token: ``emitted`` is False for an end-of-generation token
    (which is not part of the output)."""

    emitted: bool
    text: str
    stop: StopReason | None


class StopChecker:
    def __init__(
        self,
        piece: Callable[[int], bytes],
        is_eog: Callable[[int], bool],
        *,
        max_tokens: int,
        stop: tuple[str, ...] = (),
        ignore_eog: bool = False,
    ):
        self._piece = piece
        self._is_eog = is_eog
        self.max_tokens = max_tokens
        self.stop_strings = tuple(s for s in stop if s)
        self.ignore_eog = ignore_eog
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""  # decoded text not yet released (possible stop-string prefix)
        self._hold = max((len(s) for s in self.stop_strings), default=1) - 1
        self.tokens: list[int] = []
        self.text = ""
        self.stop_reason: StopReason | None = None

    def push(self, token: int) -> Pushed:
        if self.stop_reason is not None:
            raise RuntimeError("push after stop")
        if not self.ignore_eog and self._is_eog(token):
            self.stop_reason = StopReason.EOG
            return Pushed(False, self._flush(), StopReason.EOG)
        self.tokens.append(token)
        self._held += self._decoder.decode(self._piece(token))
        out = ""
        for s in self.stop_strings:
            i = self._held.find(s)
            if i >= 0:
                out = self._held[:i]
                self._held = ""
                self.text += out
                self.stop_reason = StopReason.STOP_STRING
                return Pushed(True, out, StopReason.STOP_STRING)
        if len(self.tokens) >= self.max_tokens:
            self.stop_reason = StopReason.MAX_TOKENS
            return Pushed(True, self._flush(), StopReason.MAX_TOKENS)
        if self._hold and self._held:
            release = self._releasable()
            out, self._held = self._held[:release], self._held[release:]
        else:
            out, self._held = self._held, ""
        self.text += out
        return Pushed(True, out, None)

    def finish(self, reason: StopReason) -> str:
        """Stop from outside (cancel, context full); returns held-back text."""
        if self.stop_reason is None:
            self.stop_reason = reason
        return self._flush()

    def _releasable(self) -> int:
        """Length of the held text that can no longer start a stop string."""
        held = self._held
        for start in range(max(0, len(held) - self._hold), len(held)):
            tail = held[start:]
            if any(s.startswith(tail) for s in self.stop_strings):
                return start
        return len(held)

    def _flush(self) -> str:
        out = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        self.text += out
        return out
