"""A generation's draft sources, run to each round's plan.

The round planner (:mod:`engine.runtime.decode.policy.planner`) decides what a round
drafts; :class:`Drafts` runs that plan with the sources the generation has — the MTP head
(:class:`~engine.runtime.decode.drafting.propose.MtpDraft`) and the suffix draft
(:class:`~engine.runtime.decode.drafting.suffix.SuffixDraft`), either or both — and keeps both
informed: the prompt (:meth:`Drafts.begin`) and each round's kept tokens
(:meth:`Drafts.accept`). It decides nothing itself. One per generation, on the thread that
runs its loop.
"""

from __future__ import annotations


import numpy as np

from engine.runtime.decode.policy.planner import FORCED, SUFFIX, SUFFIX_MTP, Plan, RoundPlanner
from engine.runtime.decode.policy.tuning import MAX_DRAFT
from engine.runtime.decode.prefill import Prefill, prefill
from engine.runtime.decode.drafting.propose import MtpDraft, Proposal
from engine.runtime.decode.session import Session
from engine.runtime.decode.drafting.suffix import SuffixDraft


class Drafts:
    """``mtp`` (None: no head, or MTP off) and ``suffix`` (None: suffix drafts off) over
    ``session``."""

    def __init__(self, session: Session, mtp: MtpDraft | None, suffix: SuffixDraft | None):
        assert mtp is not None or suffix is not None
        self.s = session
        self.mtp = mtp
        self.suffix = suffix
        #: the verify returns hidden rows only for an MTP head to read
        self.needs_hidden = mtp is not None
        #: the suffix match the planner weighs (None: no suffix drafts)
        self.match = suffix.match if suffix is not None else None

    def begin(self, prompt: list[int], *, idle: bool, **prefill_kw) -> Prefill:
        """Prefill the target (``prefill_kw``: :func:`~engine.runtime.decode.prefill.prefill`'s
        cancel, choose_first, points and cache) and the head's entries (deferred while the
        depth policy is ``idle``); the suffix index learns the prompt and the first token."""
        if self.mtp is not None:
            pf = self.mtp.begin(prompt, idle=idle, **prefill_kw)
        else:
            pf = prefill(self.s, prompt, speculative=False, **prefill_kw)
        if self.suffix is not None:
            self.suffix.extend([*prompt, pf.first_token])
        return pf

    def propose(self, plan: Plan, planner: RoundPlanner, id_last: int, pos0: int, rows: int) -> Proposal:
        """The drafts of ``plan`` after ``id_last`` (at ``pos0``); ``rows``: the widest
        verify. An MTP chain whose last tokens start an earlier match may be extended by
        what followed it, as far as the planner finds it pays."""
        if plan.drafter in (FORCED, SUFFIX):
            return Proposal(list(plan.tokens))
        mtp = self.mtp
        if plan.drafter == SUFFIX_MTP:
            assert mtp is not None
            return mtp.draft_after(id_last, pos0, plan.tokens, plan.depth)
        proposal = mtp.draft(id_last, pos0, plan.depth) if mtp is not None and plan.depth > 0 else Proposal()
        chain = plan.chain = len(proposal.tokens)
        width = min(MAX_DRAFT, rows)
        if self.suffix is not None and chain and proposal.q is None and width > chain:
            more = planner.extension(plan, plan.depth, self.suffix.continuation(proposal.tokens, width - chain))
            if more:
                proposal.tokens.extend(more)
                proposal.extended = len(more)
        return proposal

    def accept(self, tokens: list[int], hidden: np.ndarray | None) -> None:
        """The tokens the target kept this round (the last one its own next token), each
        with the target's hidden row before it when the verify returned them."""
        if self.mtp is not None:
            assert hidden is not None
            self.mtp.accept(tokens, hidden)
        if self.suffix is not None:
            self.suffix.extend(tokens)
