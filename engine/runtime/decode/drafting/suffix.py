"""Drafts from the conversation itself: the continuation of the longest earlier match.

Agents' outputs copy their inputs (code edits rewrite a file the prompt holds, summaries
quote tool results, JSON echoes records) and small models fall into loops. When the
newest tokens occurred before — in the prompt, the output so far, or an earlier output of
the same model — what followed them then is a draft that costs no model call at all
(vLLM's suffix decoding, llama.cpp's n-gram lookup).

:class:`SuffixIndex` keeps, for n-grams of a few lengths, where each last ended, over
every token it was given: :meth:`SuffixIndex.propose` is what followed the longest match
of its own newest tokens, :meth:`SuffixIndex.lookup` what followed another sequence's.
:class:`OutputStore` is a loaded model's recent outputs, bounded. :class:`SuffixDraft`
is the draft source (:mod:`engine.runtime.decode.drafting.propose`) over them: it proposes; the
round planner (:mod:`engine.runtime.decode.policy.planner`) decides each round whether to
take the MTP chain, the suffix draft, the chain extended by a match its last tokens start,
or a suffix draft whose match ended extended by the head's chain — whichever expects the
most tokens per millisecond. Output never changes: every draft is verified
(docs/agent-speed.md).
"""

from __future__ import annotations

import threading
from collections import deque

from engine.runtime.decode.policy.planner import SuffixLearned

#: n-gram lengths matched, longest first; the shortest is the shortest match worth a draft
LENGTHS = (16, 8, 4, 3)
MIN_MATCH = LENGTHS[-1]
#: tokens of recent outputs a loaded model keeps for drafting (:class:`OutputStore`)
STORE_TOKENS = 32768
#: between two stored outputs: no n-gram spans it and no draft runs past it
_SEP = -1
#: tokens given at once past which they are indexed in bulk (a prompt, a stored output)
_BULK = 64


class SuffixIndex:
    """Where each n-gram of :data:`LENGTHS` last ended, over the tokens seen so far.

    Positions are absolute: :meth:`drop` forgets the oldest tokens by moving :attr:`base`
    on, and an n-gram whose last end is older is a miss (its earlier ends are older
    still), so dropping costs no re-indexing; the stale entries are swept out once they
    outnumber the live ones (:meth:`_sweep`)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        #: absolute position of ``tokens[0]`` (the tokens before it were dropped)
        self.base = 0
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in LENGTHS}
        #: (absolute end of the earlier occurrence, length) of the longest match ending at
        #: the newest token
        self._match: tuple[int, int] | None = None

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        base = self.base
        new = [int(t) for t in tokens]
        if len(new) > _BULK:  # a prompt: index all but its last token at once (no match is read there)
            start = len(toks)
            toks.extend(new[:-1])
            for n in LENGTHS:  # ascending: a later occurrence overwrites an earlier one
                self._ends[n].update(
                    (tuple(toks[i + 1 - n : i + 1]), base + i) for i in range(max(start, n - 1), len(toks))
                )
            new = new[-1:]
        for t in new:
            toks.append(t)
            i = len(toks) - 1
            match = None
            for n in LENGTHS:
                if i + 1 < n:
                    continue
                key = tuple(toks[i + 1 - n :])
                ends = self._ends[n]
                if match is None:
                    end = ends.get(key)
                    if end is not None and end >= base:
                        match = (end, n)
                ends[key] = base + i
            self._match = match

    def drop(self, count: int) -> None:
        """Forget the oldest ``count`` tokens (no n-gram ends in them any more)."""
        count = min(count, len(self.tokens))
        del self.tokens[:count]
        self.base += count
        if self._match is not None and self._match[0] < self.base:
            self._match = None
        if sum(len(e) for e in self._ends.values()) > 2 * len(LENGTHS) * max(len(self.tokens), _BULK):
            self._sweep()

    def _sweep(self) -> None:
        """Drop the entries of n-grams whose last end was dropped."""
        base = self.base
        self._ends = {n: {k: v for k, v in e.items() if v >= base} for n, e in self._ends.items()}

    def propose(self, k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the longest earlier match of the newest
        tokens, and the match's length (0: no draft)."""
        m = self._match
        if m is None or k < 1:
            return [], 0
        return self._after(*m, k, periodic=True)

    def lookup(self, tail: list[int], k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the longest n-gram ending ``tail`` anywhere in
        this index (another sequence's newest tokens), and that n-gram's length."""
        if k < 1:
            return [], 0
        for n in LENGTHS:
            if len(tail) >= n:
                end = self._ends[n].get(tuple(tail[-n:]))
                if end is not None and end >= self.base:
                    tokens, _ = self._after(end, n, k)
                    if tokens:
                        return tokens, n
        return [], 0

    def _after(self, end: int, n: int, k: int, *, periodic: bool = False) -> tuple[list[int], int]:
        toks = self.tokens
        i = end - self.base  # where the match ends in ``tokens``
        if i < 0:
            return [], 0
        out = toks[i + 1 : min(i + 1 + k, len(toks))]
        if _SEP in out:
            out = out[: out.index(_SEP)]
        elif periodic and out and len(out) < k and i + 1 + len(out) == len(toks):
            # the continuation runs into the newest tokens: the text repeats with this
            # period, so the draft goes on repeating it (what chaining an n-gram lookup
            # through its own draft gives), as far as ``k``
            period = out[:]
            while len(out) < k:
                out.extend(period[: k - len(out)])
        return out, n if out else 0


class OutputStore:
    """A loaded model's recent outputs, for drafting in later requests: the next turn of
    an agent often repeats what an earlier answer (or another client's) wrote. Bounded
    to :data:`STORE_TOKENS`: the oldest outputs go first, forgotten in place
    (:meth:`SuffixIndex.drop`), so adding to a full store costs what adding to any does
    (rebuilding the index of 32k tokens took ~50 ms of the engine thread, every stream
    waiting, at each generation's end). Output never changes by what is stored (every
    draft is verified); only which drafts are tried does.

    Sequences add and look up on the engine thread (the steps' one thread); the lock
    keeps an add and a lookup from another thread (a tool, a test) from meeting."""

    def __init__(self, limit: int = STORE_TOKENS):
        self.limit = limit
        #: the stored outputs' lengths, oldest first, each with the separator before it
        self._outputs: deque[int] = deque()
        self._held = 0  # their sum: the index's tokens, separators included
        self._index = SuffixIndex()
        self._lock = threading.Lock()
        self.learned = SuffixLearned()

    @property
    def tokens(self) -> int:
        """Tokens held (separators not counted)."""
        return self._held - len(self._outputs)

    def add(self, tokens: list[int]) -> None:
        out = [int(t) for t in tokens[-self.limit :]]
        if len(out) < MIN_MATCH + 1:
            return
        with self._lock:
            self._index.extend([_SEP, *out])
            self._outputs.append(len(out) + 1)
            self._held += len(out) + 1
            dropped = 0
            while self.tokens > self.limit:
                n = self._outputs.popleft()
                self._held -= n
                dropped += n
            if dropped:
                self._index.drop(dropped)

    def lookup(self, tail: list[int], k: int) -> tuple[list[int], int]:
        with self._lock:
            return self._index.lookup(tail, k)


class SuffixDraft:
    """A draft source that proposes what followed the newest tokens' longest earlier
    match: in this generation's own tokens (its prompt and output so far), else, where
    that match is shorter than the longest length, in the model's recent outputs
    (``store``). It only proposes: the round planner (engine.runtime.decode.policy.planner)
    decides whether a round takes it and how much of it."""

    def __init__(self, store: OutputStore | None = None):
        self.index = SuffixIndex()
        self.store = store

    def extend(self, tokens: list[int]) -> None:
        """Tokens that are now the sequence's (the prompt, then each round's kept ones)."""
        self.index.extend(tokens)

    def match(self, width: int) -> tuple[list[int], int]:
        """Up to ``width`` tokens that followed the longest earlier match of the newest
        tokens, and the match's length (0: none)."""
        tokens, n = self.index.propose(width)
        if self.store is not None and n < LENGTHS[0]:  # a longer match in earlier outputs wins
            stored, m = self.store.lookup(self.index.tokens[-LENGTHS[0] :], width)
            if m > n:
                tokens, n = stored, m
        return _until_media(tokens), n

    def continuation(self, chain: list[int], width: int) -> tuple[list[int], int]:
        """Up to ``width`` tokens that followed an earlier occurrence of the newest tokens
        followed by ``chain`` (drafts not yet verified), and that match's length."""
        tokens, n = self.index.lookup([*self.index.tokens[-LENGTHS[0] :], *chain], width)
        return _until_media(tokens), n


def _until_media(tokens: list[int]) -> list[int]:
    """A proposal up to the first row of a picture (a prompt's negative ids:
    engine.runtime.media.projector), which is no token to draft."""
    for i, t in enumerate(tokens):
        if t < 0:
            return tokens[:i]
    return tokens
