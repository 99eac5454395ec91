"""Repetition penalties: OpenAI's ``presence_penalty`` and ``frequency_penalty`` and
llama.cpp's ``repeat_penalty``, applied to a row by the generated tokens before it.

Counted over the tokens generated so far (not the prompt), as OpenAI defines them: a
token seen ``c`` times loses ``c * frequency + presence`` from its logit, and
``repeat_penalty`` divides a positive logit (multiplies a negative one) as llama.cpp's
penalties sampler does. Plain decoding penalises each step's row by the output so far;
a speculative verify penalises row ``i`` by the output so far plus the drafts before it
(:class:`PenalizedRows`), so both make the same choice at every position.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Penalties:
    presence: float = 0.0
    frequency: float = 0.0
    repeat: float = 1.0

    @property
    def active(self) -> bool:
        return self.presence != 0.0 or self.frequency != 0.0 or self.repeat != 1.0

    def apply(self, logits: np.ndarray, counts: Counter, extra: Sequence[int] = ()) -> np.ndarray:
        """A copy of ``logits`` penalised for ``counts`` (token -> times generated) plus
        the tokens in ``extra``."""
        if extra:
            counts = counts.copy()
            counts.update(extra)
        out = np.array(logits, dtype=np.float32, copy=True)
        if not counts:
            return out
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        n = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        x = out[ids]
        if self.repeat != 1.0:
            x = np.where(x > 0, x / self.repeat, x * self.repeat)
        out[ids] = x - n * self.frequency - self.presence
        return out


class PenalizedRows:
    """The target's verify rows as the acceptance rule should see them: row ``i``
    penalised by the output so far plus ``drafts[:i]``."""

    def __init__(self, rows, penalties: Penalties, counts: Counter, drafts: Sequence[int]):
        self.rows = rows
        self.penalties = penalties
        self.counts = counts
        self.drafts = drafts

    def logits(self, i: int) -> np.ndarray:
        return self.penalties.apply(self.rows.logits(i), self.counts, self.drafts[:i])

    def argmax_rows(self, n: int) -> list[int]:
        return [int(np.argmax(self.logits(i))) for i in range(n)]
