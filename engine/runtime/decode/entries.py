"""What the decode core's modules share about MTP entries: the leaf they all import.

An MTP context holds entry ``p`` for token ``p`` paired with the target's hidden state of
position ``p - 1`` (:mod:`engine.runtime.decode.session`). A *hole* is a position
skipped on purpose: absent from the MTP context, not wrong. :class:`Lag` holds entries
not fed yet; :class:`FedTail` the newest ones fed, for decoding them again.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

HOLE = -1  # an MTP position skipped on purpose (see Session.sync_draft)

#: picks a token from a logits row (sampling); the default everywhere is the argmax
Choose = Callable[[np.ndarray], int]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_prefix_entries(entries: list[int], tokens: list[int]) -> int:
    """Like :func:`common_prefix`, where a hole matches any token: a skipped MTP entry
    is absent from the MTP context, not wrong."""
    n = min(len(entries), len(tokens))
    i = 0
    while i < n and (entries[i] == tokens[i] or entries[i] == HOLE):
        i += 1
    return i


class FedTail:
    """The newest entries decoded into the MTP context: position of the first, tokens and
    hidden rows (the rows as fed). Used only where the MTP context still holds them, as
    :meth:`refeed` checks against ``draft_tokens``."""

    SIZE = 4

    def __init__(self):
        self.start = 0
        self.tokens: list[int] = []
        self.rows: list[np.ndarray] = []

    def clear(self) -> None:
        self.tokens.clear()
        self.rows.clear()

    def add(self, pos: int, tokens: list[int], rows: np.ndarray) -> None:
        if pos != self.start + len(self.tokens):
            self.clear()
            self.start = pos
        drop = len(tokens) - self.SIZE  # a prompt chunk: only its newest entries can be kept
        if drop > 0:
            self.clear()
            self.start = pos + drop
            tokens, rows = tokens[drop:], rows[drop:]
        self.tokens.extend(tokens)
        self.rows.extend(rows.copy())  # not views that keep a whole chunk's rows alive
        cut = len(self.tokens) - self.SIZE
        if cut > 0:
            del self.tokens[:cut], self.rows[:cut]
            self.start += cut

    def truncate(self, keep: int) -> None:
        n = max(0, keep - self.start)
        del self.tokens[n:], self.rows[n:]

    def refeed(self, draft_tokens: list[int], want: int) -> int:
        """How many of the newest ``want`` entries can be decoded again (0: none are
        known, or the context no longer holds what was fed there)."""
        end = len(draft_tokens)
        if end != self.start + len(self.tokens):
            return 0
        n = min(want, len(self.tokens))
        if n <= 0 or draft_tokens[end - n : end] != self.tokens[len(self.tokens) - n :]:
            return 0
        return n

    def entries(self, pos: int, n: int) -> tuple[list[int], np.ndarray]:
        i = pos - self.start
        return self.tokens[i : i + n], np.stack(self.rows[i : i + n])


class Lag:
    """MTP entries not fed yet: tokens at the positions after ``draft_tokens``, each with
    the target's hidden state of the previous position. While drafting is off (depth 0)
    they accumulate here and are fed in one batch when drafting resumes, or when the
    next prompt still contains them."""

    def __init__(self):
        self.tokens: list[int] = []
        self.hidden: list[np.ndarray] = []

    def append(self, token: int, hidden: np.ndarray) -> None:
        self.tokens.append(token)
        self.hidden.append(hidden)

    def extend(self, tokens: list[int], hidden: np.ndarray) -> None:
        self.tokens.extend(tokens)
        self.hidden.extend(hidden)

    def prepend(self, token: int, hidden: np.ndarray) -> None:
        """Put an entry back in front (one the MTP context had to drop again)."""
        self.tokens.insert(0, token)
        self.hidden.insert(0, hidden)

    def keep(self, n: int) -> None:
        """Keep only the oldest ``n`` entries."""
        del self.tokens[max(n, 0) :], self.hidden[max(n, 0) :]

    def drop_oldest(self, n: int) -> None:
        del self.tokens[:n], self.hidden[:n]

    def clear(self) -> None:
        self.tokens.clear()
        self.hidden.clear()
