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
    """Where each n-gram of :data:`LENGTHS` last ended, over the tokens seen so far."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in LENGTHS}
        #: (end of the earlier occurrence, length) of the longest match ending at the newest token
        self._match: tuple[int, int] | None = None

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        new = [int(t) for t in tokens]
        if len(new) > _BULK:  # a prompt: index all but its last token at once (no match is read there)
            start = len(toks)
            toks.extend(new[:-1])
            for n in LENGTHS:  # ascending: a later occurrence overwrites an earlier one
                self._ends[n].update((tuple(toks[i + 1 - n : i + 1]), i) for i in range(max(start, n - 1), len(toks)))
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
                if match is None and key in ends:
                    match = (ends[key], n)
                ends[key] = i
            self._match = match

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
                if end is not None:
                    tokens, _ = self._after(end, n, k)
                    if tokens:
                        return tokens, n
        return [], 0

    def _after(self, end: int, n: int, k: int, *, periodic: bool = False) -> tuple[list[int], int]:
        toks = self.tokens
        out = toks[end + 1 : min(end + 1 + k, len(toks))]
        if _SEP in out:
            out = out[: out.index(_SEP)]
        elif periodic and out and len(out) < k and end + 1 + len(out) == len(toks):
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
    to :data:`STORE_TOKENS`: the oldest outputs go first. Output never changes by what
    is stored (every draft is verified); only which drafts are tried does.

    Several sequences draft from it at once (slots): :meth:`add` takes a lock and, when
    the bound drops outputs, builds a new index and swaps it in, so a reader never sees
    one half-built."""

    def __init__(self, limit: int = STORE_TOKENS):
        self.limit = limit
        self._outputs: deque[list[int]] = deque()
        self._index = SuffixIndex()
        self._lock = threading.Lock()
        self.learned = SuffixLearned()

    @property
    def tokens(self) -> int:
        """Tokens held (separators not counted)."""
        return sum(len(o) for o in self._outputs)

    def add(self, tokens: list[int]) -> None:
        out = [int(t) for t in tokens[-self.limit :]]
        if len(out) < MIN_MATCH + 1:
            return
        with self._lock:
            self._outputs.append(out)
            held = self.tokens
            if held <= self.limit:
                self._index.extend([_SEP, *out])
                return
            while held > self.limit:
                held -= len(self._outputs.popleft())
            index = SuffixIndex()
            for o in self._outputs:
                index.extend([_SEP, *o])
            self._index = index

    def lookup(self, tail: list[int], k: int) -> tuple[list[int], int]:
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
