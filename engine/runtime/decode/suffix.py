"""Drafts from the conversation itself: the continuation of the longest earlier match.

Agents' outputs copy their inputs (code edits rewrite a file the prompt holds, summaries
quote tool results, JSON echoes records) and small models fall into loops. When the
newest tokens occurred before — in the prompt or the output so far — what followed them
then is a draft that costs no model call at all (vLLM's suffix decoding, llama.cpp's
n-gram lookup).

:class:`SuffixIndex` keeps, for n-grams of a few lengths, where each last ended, over
every token it was given; :meth:`SuffixIndex.match` is the longest n-gram ending at the
newest token that also ended earlier, and :meth:`SuffixIndex.propose` what followed it.
:class:`SuffixOrMtp` is a draft source (:mod:`engine.runtime.decode.propose`) that each
round takes the suffix draft or the MTP chain, whichever expects more tokens per
millisecond: the suffix draft's acceptance is learned per match length, its cost is a
verify of its width (no MTP decode); the MTP chain's expected tokens and costs are the
depth policy's. Output never changes: every draft is verified.
"""

from __future__ import annotations

import numpy as np

from engine.runtime.decode.entries import Choose
from engine.runtime.decode.prefill import Prefill
from engine.runtime.decode.propose import MtpDraft, Proposal
from engine.runtime.decode.cache.snapshotcache import SnapshotCache

#: n-gram lengths matched, longest first; the shortest is the shortest match worth a draft
LENGTHS = (16, 8, 4, 3)
MIN_MATCH = LENGTHS[-1]
#: most tokens one suffix draft proposes
MAX_DRAFT = 16
#: acceptance prior per token of a suffix draft, by match length (16 or 8, 4, 3: a long
#: match is likely to go on), its weight in observations, and the decay of observations
PRIORS, PRIOR_N, DECAY = (0.9, 0.7, 0.5), 2.0, 0.97
#: the MTP chain's acceptance prior, for a fixed depth (which has no estimates of its own)
MTP_PRIOR = 0.7


class SuffixIndex:
    """Where each n-gram of :data:`LENGTHS` last ended, over the tokens seen so far."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in LENGTHS}
        #: (end of the earlier occurrence, length) of the longest match ending at the newest token
        self._match: tuple[int, int] | None = None

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        for t in tokens:
            toks.append(int(t))
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
        end, n = m
        out = self.tokens[end + 1 : min(end + 1 + k, len(self.tokens))]
        return out, n


def _bucket(n: int) -> int:
    return 0 if n >= 8 else 1 if n >= 4 else 2


def _expected(p: float, n: int) -> float:
    """Expected tokens of a round whose ``n`` drafts are each accepted with ``p`` given the
    ones before (the target's own token included)."""
    return sum(p**i for i in range(n + 1))


class SuffixOrMtp:
    """A draft source: the suffix draft or the MTP chain, each round whichever pays more."""

    def __init__(self, mtp: MtpDraft, policy):
        self.mtp = mtp
        self.policy = policy
        self.index = SuffixIndex()
        self.acc = [0.0, 0.0, 0.0]  # decayed accepted / reached tokens per match-length bucket
        self.reach = [0.0, 0.0, 0.0]
        self.mtp_acc = self.mtp_reach = 0.0  # the MTP chain's, for a fixed depth
        self._last: tuple[int, int] | None = None  # (bucket, drafted) of the last suffix round
        self._mtp_k = 0  # drafts of the last MTP round
        #: where this round's drafts come from (the round's statistics read it)
        self.source = "mtp"

    # --------------------------------------------------------------- protocol
    def begin(self, prompt: list[int], *, cancel, choose_first: Choose | None, idle: bool, points=(),
              cache: SnapshotCache | None = None) -> Prefill:  # fmt: skip
        pf = self.mtp.begin(prompt, cancel=cancel, choose_first=choose_first, idle=idle, points=points, cache=cache)
        self.index.extend([*prompt, pf.first_token])
        return pf

    def draft(self, id_last: int, pos0: int, k: int, room: int | None = None) -> Proposal:
        """The suffix draft (at most ``room`` tokens: the verify's limit this round) when
        it expects more tokens per millisecond than the MTP chain of depth ``k`` (the
        policy's choice), else the chain."""
        width = min(MAX_DRAFT, room if room is not None else k)
        tokens, n = self.index.propose(width)
        if tokens and self._suffix_pays(len(tokens), _bucket(n), k):
            self.source = "suffix"
            self._last = (_bucket(n), len(tokens))
            return Proposal(list(tokens))
        self.source, self._last = "mtp", None
        proposal = self.mtp.draft(id_last, pos0, k)
        self._mtp_k = len(proposal.tokens)
        return proposal

    def accept(self, tokens: list[int], hidden: np.ndarray) -> None:
        kept = len(tokens) - 1  # the drafts kept (the last token is the target's own)
        if self._last is not None:
            b, drafted = self._last
            self.acc[b] = self.acc[b] * DECAY + min(kept, drafted)
            self.reach[b] = self.reach[b] * DECAY + min(kept + 1, drafted)
        elif self._mtp_k:
            self.mtp_acc = self.mtp_acc * DECAY + min(kept, self._mtp_k)
            self.mtp_reach = self.mtp_reach * DECAY + min(kept + 1, self._mtp_k)
        self.mtp.accept(tokens, hidden)
        self.index.extend(tokens)

    # ----------------------------------------------------------------- choice
    def acceptance(self, bucket: int) -> float:
        return (self.acc[bucket] + PRIORS[bucket] * PRIOR_N) / (self.reach[bucket] + PRIOR_N)

    def _suffix_pays(self, width: int, bucket: int, k: int) -> bool:
        e_suffix = _expected(self.acceptance(bucket), width)
        costs = getattr(self.policy, "costs", None)
        rates = self.policy.rates() if hasattr(self.policy, "rates") else None
        if costs is None or rates is None:  # a fixed depth: more expected tokens wins
            q = (self.mtp_acc + MTP_PRIOR * PRIOR_N) / (self.mtp_reach + PRIOR_N)
            return e_suffix > _expected(q, k)
        mtp_rate = rates[min(k, len(rates) - 1)]
        return e_suffix / max(costs.verify_ms(width + 1), 1e-6) > mtp_rate
