"""The MTP head as a draft source: what proposes the tokens a speculative round verifies.

The loop (:mod:`engine.runtime.decode.loop`) runs each round as plan → propose → verify →
settle, the shape of llama.cpp's ``common_speculative`` and vLLM's proposers. The head
(:class:`MtpDraft`) is told the prompt (:meth:`~MtpDraft.begin`), asked for up to ``k``
tokens after the last one (:meth:`~MtpDraft.draft`, or after tokens from elsewhere:
:meth:`~MtpDraft.draft_after`), and told which of them the target kept
(:meth:`~MtpDraft.accept`); :class:`Proposal` is what a round's sources proposed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from engine.runtime.decode.entries import Choose
from engine.runtime.decode.prefill import Prefill, prefill
from engine.runtime.decode.sampling import DRAFT, Sampler
from engine.runtime.decode.session import Session
from engine.runtime.decode.cache.snapshotcache import SnapshotCache

#: most MTP entries caught up before a draft; older ones (left while drafting was off)
#: become holes in the MTP context
CATCH_UP_LIMIT = 16


@dataclass
class Proposal:
    """Drafted tokens, and for sampled drafts the distribution each was drawn from."""

    tokens: list[int] = field(default_factory=list)
    #: per draft, the head's sampling distribution (rejection sampling); None: argmax drafts
    q: list[np.ndarray] | None = None
    #: MTP catch-up entries fed before the first draft, and the time that took
    sync_rows: int = 0
    sync_ms: float = 0.0
    #: of ``tokens``, the last ones a second source added: a suffix match's after an MTP
    #: chain ("mtp+suffix"), or the head's after a suffix draft ("suffix+mtp")
    extended: int = 0


class MtpDraft:
    """Drafts with the MTP head over the session's MTP context.

    The head drafts from the target's hidden states: entry ``p`` of the MTP context is
    (token ``p``, the target's hidden row of ``p - 1``). After a verify, the kept tokens'
    entries wait in the session's lag and are fed in one batch before the next draft."""

    needs_hidden = True

    def __init__(self, session: Session, sampler: Sampler | None, cancel: threading.Event | None):
        assert session.draft is not None
        self.s = session
        #: set: sample the drafts from the head (rejection sampling); None: its argmax
        self.sampler = sampler
        self.cancel = cancel

    def begin(
        self,
        prompt: list[int],
        *,
        cancel: threading.Event | None,
        choose_first: Choose | None,
        idle: bool,
        points: tuple[int, ...] = (),
        cache: SnapshotCache | None = None,
        media: dict | None = None,
    ) -> Prefill:
        """Prefill the target and feed the prompt's MTP entries along with it (deferred
        to the lag while the depth policy is ``idle``)."""
        return prefill(
            self.s,
            prompt,
            speculative=True,
            cancel=cancel,
            choose_first=choose_first,
            defer_mtp=CATCH_UP_LIMIT if idle else None,
            points=points,
            cache=cache,
            media=media,
        )

    def draft(self, id_last: int, pos0: int, k: int, room: int | None = None) -> Proposal:
        """Up to ``k`` chained drafts after ``id_last`` (at ``pos0``). The chain's entries
        are removed from the MTP context before returning, whatever happens. (``room``:
        the widest verify this round allows; the chain never exceeds ``k``.)"""
        s = self.s
        out = Proposal(q=[] if self.sampler is not None else None)
        if k < 1:
            return out
        if s.shared:
            self._shared(id_last, pos0, k, out)
            return out
        # At depth 1 the catch-up is the round's only MTP decode: two entries wide every
        # round (one decoded again after a rejection), one graph
        d, h = self._catch_up(out, width=2 if k == 1 else 0, choose=self._pick(pos0 + 1, out))
        out.tokens.append(d)
        if s.heads > 1 and k > 1:
            self._chain(pos0, d, h, min(k, s.heads), out)
            return out
        try:
            for j in range(1, k):
                s.phase("draft", self.cancel)
                d, h = s.draft_step(d, h, self._pick(pos0 + 1 + j, out))
                out.tokens.append(d)
        finally:
            s.truncate_draft(pos0 + 1)  # drop the chain; entry pos0 (id_last) stays
        return out

    @property
    def follows(self) -> bool:
        """Whether :meth:`draft_after` can run: one head over a context of its own (a shared
        head has no entries to feed; chained heads draft under one layer per position),
        argmax drafts (a prefix from elsewhere has no distribution to sample against)."""
        return self.s.heads == 1 and not self.s.shared and self.sampler is None

    def draft_after(self, id_last: int, pos0: int, prefix: list[int], k: int) -> Proposal:
        """``prefix`` (drafts from elsewhere: a suffix match that ended) and up to ``k``
        chained drafts after it. The head is fed the prefix as if it had drafted it, one
        step per token from the hidden row the step before returned, so its first draft is
        the one its own chain would make after those tokens. The entries are removed again
        before returning, whatever happens (as :meth:`draft`'s chain)."""
        assert self.follows and prefix and k >= 1
        s = self.s
        out = Proposal(tokens=list(prefix))
        _, h = self._catch_up(out)  # the head's own first draft gives way to the prefix's
        try:
            for t in prefix:
                s.phase("draft", self.cancel)
                d, h = s.draft_step(t, h)
            out.tokens.append(d)
            for _ in range(1, k):
                s.phase("draft", self.cancel)
                d, h = s.draft_step(d, h)
                out.tokens.append(d)
        finally:
            s.truncate_draft(pos0 + 1)
        out.extended = len(out.tokens) - len(prefix)
        return out

    def _catch_up(self, out: Proposal, *, width: int = 0, choose: Choose | None = None) -> tuple[int, np.ndarray]:
        """Feed the waiting entries up to the last token (their count and time go to
        ``out``); the head's first draft and its hidden row."""
        s = self.s
        t0 = time.perf_counter()
        s.phase("draft", self.cancel)
        out.sync_rows = len(s.lag.tokens)
        s.sync_draft(logits_last=True, keep_last=CATCH_UP_LIMIT, width=width)
        out.sync_ms = (time.perf_counter() - t0) * 1000
        return s.draft_head(choose)

    def _chain(self, pos0: int, d: int, h: np.ndarray, k: int, out: Proposal) -> None:
        """Chained heads (llama.cpp's ``chain_heads``): head j drafts token j+1 from the
        whole chain so far under its own layer. Afterwards the chain is dropped together
        with entry ``pos0``, which the chain rewrote under another head; that entry goes
        back to the lag, to be fed again (for every head) with the next catch-up."""
        s = self.s
        id_last, first = s.fed.entries(pos0, 1)
        tokens, rows = [id_last[0]], [first[0]]
        try:
            for j in range(1, k):
                s.phase("draft", self.cancel)
                tokens.append(d)
                rows.append(h)
                d, h = s.chain_step(pos0, tokens, np.stack(rows), j, self._pick(pos0 + 1 + j, out))
                out.tokens.append(d)
        finally:
            s.truncate_draft(pos0)
            s.lag.prepend(tokens[0], rows[0])

    def _shared(self, id_last: int, pos0: int, k: int, out: Proposal) -> None:
        """A head that reads the target's KV cache (Gemma 4 assistants): nothing to catch
        up; every draft goes in at ``pos0``, from the token before it and the hidden row
        the previous step returned (the first: the target's, of the token before
        ``id_last``), as llama.cpp's draft-mtp does in its shared-memory mode."""
        s = self.s
        assert s.lag.tokens and s.lag.tokens[-1] == id_last, "the entry of the last token is not in the lag"
        token, h = id_last, s.lag.hidden[-1]
        s.lag.clear()
        for j in range(k):
            s.phase("draft", self.cancel)
            token, h = s.shared_step(token, pos0, h, self._pick(pos0 + 1 + j, out))
            out.tokens.append(token)

    def _pick(self, pos: int, out: Proposal) -> Choose | None:
        sampler = self.sampler
        if sampler is None:
            return None  # the head's argmax

        def choose(logits: np.ndarray) -> int:
            q = sampler.dense(logits)
            assert out.q is not None
            out.q.append(q)
            return sampler.sample_dense(q, pos, DRAFT)

        return choose

    def accept(self, tokens: list[int], hidden: np.ndarray) -> None:
        """Queue the MTP entries of the tokens the target kept (the last one is the
        target's own next token), each with the target's hidden row before it. A head
        sharing the target's memory needs only the newest."""
        s = self.s
        if s.shared:
            s.lag.clear()
            tokens, hidden = tokens[-1:], hidden[-1:]
        s.lag.extend(tokens, hidden)
