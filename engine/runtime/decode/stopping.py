"""Turning generated tokens into text, and deciding when to stop.

Tokens arrive one at a time; their bytes are decoded incrementally (a character may span
tokens). Text that could still turn out to be the start of a stop string is held back
until it can't; when a stop string completes, nothing at or past it is emitted. The
same checker serves plain and speculative decoding, so both stop at the same token.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass

STOP_EOG = "eog"
STOP_MAX_TOKENS = "max_tokens"
STOP_STRING = "stop_string"
STOP_CANCELLED = "cancelled"
STOP_CONTEXT_FULL = "context_full"


@dataclass
class Pushed:
    """Result of offering one token: ``emitted`` is False for an end-of-generation token
    (which is not part of the output)."""

    emitted: bool
    text: str
    stop: str | None


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
        self.stop_reason: str | None = None

    def push(self, token: int) -> Pushed:
        if self.stop_reason is not None:
            raise RuntimeError("push after stop")
        if not self.ignore_eog and self._is_eog(token):
            self.stop_reason = STOP_EOG
            return Pushed(False, self._flush(), STOP_EOG)
        self.tokens.append(token)
        self._held += self._decoder.decode(self._piece(token))
        out = ""
        for s in self.stop_strings:
            i = self._held.find(s)
            if i >= 0:
                out = self._held[:i]
                self._held = ""
                self.text += out
                self.stop_reason = STOP_STRING
                return Pushed(True, out, STOP_STRING)
        if len(self.tokens) >= self.max_tokens:
            self.stop_reason = STOP_MAX_TOKENS
            return Pushed(True, self._flush(), STOP_MAX_TOKENS)
        if self._hold and self._held:
            release = self._releasable()
            out, self._held = self._held[:release], self._held[release:]
        else:
            out, self._held = self._held, ""
        self.text += out
        return Pushed(True, out, None)

    def finish(self, reason: str) -> str:
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
