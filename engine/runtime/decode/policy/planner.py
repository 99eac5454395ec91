"""One round's plan: what a sequence drafts this round, from which source, how wide.

Draft sources only propose (:mod:`engine.runtime.decode.drafting.propose`: the MTP head's chain;
:mod:`engine.runtime.decode.drafting.suffix`: what followed the newest tokens' longest earlier
match). Which of them a round takes, and how many tokens, is decided here and nowhere
else, each round, by one rule: **the plan with the most expected tokens per millisecond**.

Its inputs:

* the MTP chain's depth ``k`` from the depth policy (:mod:`~engine.runtime.decode.policy.base`):
  auto learns each draft position's acceptance and what a round costs at each depth
  (:mod:`~.adaptive`, :mod:`~.costs`), alone or for the step of n sequences it decodes in
  (:mod:`~.steps`), and tries neighbouring depths and probes now and then to keep
  learning — those rounds are measurements, not the rule's choice;
* the room: the widest verify this round allows (tokens left, context, batch, logit rows);
  the chain never exceeds it;
* a grammar's forced run: tokens the grammar allows no alternative to. They are the
  round's drafts, accepted without a model call, and no plan beats them;
* the suffix match, when suffix drafts are on: its tokens and its length (a longer match
  is likely to go on: acceptance is learned per length bucket).

The candidates of a round with a suffix match are the MTP chain of depth ``k`` (at 0: a
plain round), the first ``w`` suffix tokens for every ``w``, and — where the match ended
before the room and the head can follow tokens it did not draft — all the suffix tokens
followed by ``t`` of the head's drafts for every ``t``. After a chain is drafted, its last
tokens may start an earlier match: then the chain alone and the chain followed by ``e`` of
that match's tokens for every ``e`` are the candidates (:meth:`RoundPlanner.extension`).

Each is priced by one cost model: a verify's time by the rows of the whole decode — the
step's, every sequence's, with the last step's company (:class:`~.costs.RoundCosts`,
measured on every round), the head's catch-up and chained steps, and on a recurrent model
the replays a rejection deeper than llama.cpp's rollback costs; auto's own estimates for
the chain where it runs. The tuned constants are :mod:`~.tuning`'s.

A sequence's planner lives for one generation, on the thread that runs its loop (the
engine thread); what it learns of suffix drafts is the loaded model's
(:class:`SuffixLearned`, kept with its output store).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.runtime.decode.policy.adaptive import expected_tokens
from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.policy.costs import RoundCosts, Window
from engine.runtime.decode.policy.tuning import (
    DEFAULT_SLOPE,
    FIXED_MTP_PRIOR,
    MAX_DRAFT,
    SUFFIX_DECAY,
    SUFFIX_PRIOR_N,
    SUFFIX_PRIORS,
)
from engine.runtime.decode.stats import RoundStats

#: a plan's drafter (the round's statistics read it): a grammar's forced run, the MTP chain,
#: a suffix draft, a suffix draft followed by the head's chain, the chain followed by a match
FORCED, MTP, SUFFIX, SUFFIX_MTP, MTP_SUFFIX = "forced", "mtp", "suffix", "suffix+mtp", "mtp+suffix"


def bucket(length: int) -> int:
    """A suffix match's length bucket: 0 for 8 tokens or more, 1 for 4-7, 2 shorter."""
    return 0 if length >= 8 else 1 if length >= 4 else 2


class SuffixLearned:
    """What the planner learns of suffix drafts, kept per loaded model (with its
    :class:`~engine.runtime.decode.drafting.suffix.OutputStore`) so each request starts from what
    the ones before measured: acceptance per match-length bucket, the MTP chain's for a
    fixed depth, verify times by rows, an MTP chain's draft time. (Several sequences may
    update it at once: each update is one float or one window sample, and a lost one only
    delays learning.)"""

    def __init__(self) -> None:
        self.acc = [0.0, 0.0, 0.0]  # decayed accepted / reached tokens per match-length bucket
        self.reach = [0.0, 0.0, 0.0]
        self.mtp_acc = self.mtp_reach = 0.0  # the MTP chain's, for a fixed depth
        #: verify times by rows and an MTP chain's draft time, measured on every round:
        #: what a fixed depth, plain decoding or the widest verifies cost
        self.costs = RoundCosts(MAX_DRAFT)
        self.draft_settle_ms = Window()


@dataclass(eq=False, slots=True)
class Plan:
    """What a round drafts. ``tokens``: the drafts known when planning (a forced run, the
    suffix tokens); ``depth``: the head's drafts to make (the chain's, or the tail's after
    the suffix tokens). The proposing fills in what followed (:meth:`RoundPlanner.extension`)."""

    drafter: str
    depth: int = 0
    tokens: list[int] = field(default_factory=list)
    #: the suffix match's length bucket (suffix tokens in the plan), and how many of them
    bucket: int = -1
    suffix: int = 0
    #: the head's drafts the chain made (an "mtp" or "mtp+suffix" round)
    chain: int = 0


class RoundPlanner:
    """Plans one sequence's rounds for one generation: ``policy`` (the MTP chain's depth
    learner: auto, a fixed depth, the step's in slots, or none: ``head`` False), and with
    suffix drafts on, ``learned`` (the model's; None: suffix drafts off). ``follows``: the
    head can draft after tokens it did not draft (:attr:`MtpDraft.follows`). ``rollback``:
    how deep llama.cpp rolls the target back in place (a recurrent model's ``n_rs_seq``;
    None: any depth)."""

    def __init__(
        self,
        policy: DepthPolicy,
        learned: SuffixLearned | None = None,
        *,
        head: bool = True,
        follows: bool = False,
        rollback: int | None = None,
    ):
        self.policy = policy
        self.learned = learned
        self.head = head
        self.follows = follows and head
        self.rollback = rollback
        self._estimates = getattr(policy, "estimates", None)
        self._prev_rows: int | None = None  # rows the last round's verify decode carried
        #: other sequences' rows in the last verify's step (slots; 0 alone): the next step's
        #: likely company, so a width is priced as the step it makes
        self._others = 0

    @property
    def _auto(self):
        """Auto's policy whose estimates (acceptance by position, round costs) price the chain
        this round — the model's own alone, the step's size's beside others — or None: a fixed
        depth or no head, priced by what this planner measures."""
        return self._estimates() if self._estimates is not None else None

    @property
    def idle(self) -> bool:
        """Drafting is off until a probe (the prompt's MTP entries may wait in the lag)."""
        return self.policy.idle

    # ------------------------------------------------------------------ plans
    def depth(self, room: int) -> int:
        """The MTP chain's depth this round: the depth policy's, within ``room`` (the most
        drafts the context and the tokens left allow). Asked once a round, before the round
        is timed (a choice of auto's costs ~40 us: engine.runtime.decode.policy.tuning)."""
        return min(self.policy.next_depth(), room) if self.head else 0

    def plan(self, k: int, rows: int, forced: list[int], match=None) -> Plan:
        """This round's plan, with the chain at depth ``k`` (:meth:`depth`). ``rows``: the
        widest verify (the room, cut to the logit rows a decode reads); ``forced``: the
        grammar's forced run (empty: none); ``match(width)``: the suffix match of up to
        ``width`` tokens as (tokens, match length), or None without suffix drafts."""
        if forced:
            return Plan(FORCED, tokens=list(forced))
        if match is None or self.learned is None:
            return Plan(MTP, k)
        width = min(MAX_DRAFT, rows)
        tokens, length = match(width)
        if not tokens:
            return Plan(MTP, k)
        b = bucket(length)
        take, tail = self.choose_suffix(len(tokens), b, k, width - len(tokens) if len(tokens) < width else 0)
        if not take:
            return Plan(MTP, k)
        if tail:
            return Plan(SUFFIX_MTP, tail, list(tokens), b, take)
        return Plan(SUFFIX, 0, list(tokens[:take]), b, take)

    def choose_suffix(self, n: int, b: int, k: int, room: int) -> tuple[int, int]:
        """Of ``n`` suffix tokens in bucket ``b``, the plan with the most expected tokens
        per ms against the chain of depth ``k``: (suffix tokens, head's drafts after them);
        (0, 0): the chain. Head drafts follow only all ``n`` tokens, at most ``room``."""
        best, best_rate = (0, 0), self.mtp_rate(k)
        for w, rate in enumerate(self._suffix_rates(n, b), start=1):
            if rate > best_rate:
                best, best_rate = (w, 0), rate
        if room and self.follows:
            for t, rate in enumerate(self._tail_rates(n, b, room), start=1):
                if rate > best_rate:
                    best, best_rate = (n, t), rate
        return best

    def extension(self, plan: Plan, k: int, match: tuple[list[int], int]) -> list[int]:
        """After an MTP chain of ``plan.chain`` drafts, the tokens of ``match`` (what
        followed an earlier occurrence of the chain's last tokens) to append: the count with
        the most expected tokens per ms, when that beats the chain alone. ``plan`` becomes
        an "mtp+suffix" one when any is taken."""
        tokens, length = match
        if not tokens or self.learned is None:
            return []
        b = bucket(length)
        take = self.extension_width(len(tokens), b, k)
        if take:
            plan.drafter, plan.bucket, plan.suffix = MTP_SUFFIX, b, take
        return tokens[:take]

    # --------------------------------------------------------------- learning
    def kept(self, plan: Plan, kept: int) -> None:
        """The round of ``plan`` kept ``kept`` of its drafts: the acceptance of its suffix
        tokens by bucket and, at a fixed depth, of the chain (auto learns its own from the
        round's statistics: :meth:`observe`)."""
        L = self.learned
        if L is None or plan.drafter == FORCED:
            return
        if plan.drafter in (MTP, MTP_SUFFIX) and plan.chain:
            L.mtp_acc = L.mtp_acc * SUFFIX_DECAY + min(kept, plan.chain)
            L.mtp_reach = L.mtp_reach * SUFFIX_DECAY + min(kept + 1, plan.chain)
        if plan.suffix:
            start = plan.chain if plan.drafter == MTP_SUFFIX else 0  # the suffix tokens' first
            if kept >= start:  # reached
                b = plan.bucket
                L.acc[b] = L.acc[b] * SUFFIX_DECAY + min(kept - start, plan.suffix)
                L.reach[b] = L.reach[b] * SUFFIX_DECAY + min(kept - start + 1, plan.suffix)

    def observe(self, r: RoundStats, *, constrained: bool) -> None:
        """A settled round's statistics: verify times by the rows of the whole decode (alone
        the round's own; in slots the step's, every sequence's), and for the depth policy
        the MTP chain's unconstrained rounds (a constrained round's costs include the
        grammar's masks and its drafts were cut to what the grammar allows: it would teach
        auto about the grammar, not the model; nor would a suffix draft's round teach it
        about the head)."""
        if not constrained and r.drafter == MTP:
            self.policy.observe(r)
        L = self.learned
        if L is None or r.forced:
            return
        own = r.drafted + 1
        rows = max(r.step_rows, own)
        if rows == self._prev_rows:  # a decode of a new size pays llama.cpp's graph set-up
            L.costs.add_verify(rows, r.verify_ms)
        self._prev_rows = rows
        self._others = rows - own
        if r.drafter == MTP and r.drafted:
            L.draft_settle_ms.add(r.draft_settle_ms)

    # ---------------------------------------------------------------- pricing
    def acceptance(self, b: int) -> float:
        """A suffix token's chance of being kept once reached, in match-length bucket ``b``."""
        L = self.learned
        assert L is not None
        return (L.acc[b] + SUFFIX_PRIORS[b] * SUFFIX_PRIOR_N) / (L.reach[b] + SUFFIX_PRIOR_N)

    def _cost_model(self) -> RoundCosts:
        """Where verify times come from: every round's verify measured here (suffix rounds
        teach auto nothing, so its own estimates never see the widest verifies); auto's
        estimates until this planner has measured one."""
        L = self.learned
        if L is not None and (L.costs.verify or self._auto is None):
            return L.costs
        if self._auto is not None:
            return self._auto.costs
        return RoundCosts(MAX_DRAFT)

    def verify_ms(self, rows: int) -> float:
        """A verify of ``rows`` rows of this sequence's, in a step with the others' as last time."""
        return self._cost_model().verify_ms(self._others + rows)

    def _verify_table(self, n: int) -> list[float]:
        """:meth:`verify_ms` of 0..``n`` rows (index 0 unused)."""
        full = self._cost_model().verify_table(self._others + n)
        return [0.0, *full[self._others + 1 :]]

    def _replays(self, ps: list[float], v: list[float]) -> list[float]:
        """Expected replay time of a verify of the first ``w`` drafts, for w in 0..len(ps)
        (``ps``: each draft's chance of being kept once reached; ``v``: verify ms by rows).
        On a recurrent model a rejection more than ``rollback`` drafts deep is rolled back
        by decoding the kept tokens again from a checkpoint (:meth:`Session.checkpoint`):
        a verify of their rows. Nothing elsewhere."""
        n = self.rollback
        out = [0.0] * (len(ps) + 1)
        if n is None or len(ps) <= n:
            return out
        acc, reach = 0.0, 1.0  # acc: replays of kept counts below w - n
        for w in range(n + 1, len(ps) + 1):
            j = w - n - 1  # the deepest kept count whose rejection reaches past the rollback
            acc += reach * (1 - ps[j]) * v[j + 1]
            reach *= ps[j]
            out[w] = acc
        return out

    def mtp_rate(self, k: int) -> float:
        """Expected tokens per ms of the MTP chain of depth ``k`` (0: a plain round)."""
        _, e, _, cost = self._chain(k)
        return e / cost

    def _chain(self, k: int) -> tuple[list[float], float, float, float]:
        """An MTP chain of ``k`` drafts (0: a plain round): each draft's acceptance, the
        expected tokens, the chance all ``k`` are kept, and the round's cost in ms — auto's
        estimates where it runs (its :meth:`~AdaptiveDepth.rates` divide the same two),
        else this planner's own."""
        if self._auto is not None:
            ps = list(self._auto.acceptances()[:k])
            cost = self._auto.costs.round_ms(k)
        else:
            ps = [self._fixed_acceptance()] * k
            cost = self.verify_ms(k + 1)
            if k:
                L = self.learned
                cost += (
                    L.draft_settle_ms.median
                    if L is not None and L.draft_settle_ms
                    else DEFAULT_SLOPE * k * self.verify_ms(1)
                )
        return ps, expected_tokens(ps)[-1], math.prod(ps), max(cost, 1e-6)

    def _suffix_rates(self, n: int, b: int) -> list[float]:
        """Expected tokens per ms of the first ``w`` suffix tokens, for w in 1..``n``: a
        verify of their rows and, on a recurrent model, its replays."""
        p = self.acceptance(b)
        v = self._verify_table(n + 1)
        replays = self._replays([p] * n, v)
        out, e, reach = [], 1.0, 1.0
        for w in range(1, n + 1):
            reach *= p
            e += reach
            out.append(e / max(v[w + 1] + replays[w], 1e-6))
        return out

    def _tail_rates(self, n: int, b: int, room: int) -> list[float]:
        """Expected tokens per ms of all ``n`` suffix tokens followed by ``t`` of the head's
        drafts, for t in 1..``room``. They count only if every suffix token is kept; they
        cost the head a step per suffix token and per draft but the last, the wider verify
        and its replays. The head's chain after tokens it did not draft is taken to be as
        good as its own chain that deep."""
        p = self.acceptance(b)
        heads = self._head_acceptances()
        ps = [p] * n + [heads[min(n + i, len(heads) - 1)] for i in range(room)]
        v = self._verify_table(n + 1 + room)
        replays = self._replays(ps, v)
        e = sum(p**j for j in range(n + 1))
        sync, step = self._head_ms()
        out, reach, gain = [], p**n, 0.0
        for i in range(1, room + 1):
            reach *= ps[n + i - 1]
            gain += reach
            cost = v[n + 1 + i] + replays[n + i] + sync + (n + i - 1) * step
            out.append((e + gain) / max(cost, 1e-6))
        return out

    def suffix_width(self, width: int, b: int, k: int) -> int:
        """How many of ``width`` suffix tokens to draft, against the chain of depth ``k``
        (no head after them); 0: the suffix draft does not pay."""
        return self.choose_suffix(width, b, k, 0)[0]

    def tail_width(self, width: int, b: int, room: int) -> int:
        """How many of the head's drafts (at most ``room``) to append after ``width``
        suffix tokens whose match ended, against those tokens alone; 0: none."""
        best, best_rate = 0, self._suffix_rates(width, b)[-1]
        for t, rate in enumerate(self._tail_rates(width, b, room), start=1):
            if rate > best_rate:
                best, best_rate = t, rate
        return best

    def extension_width(self, width: int, b: int, k: int) -> int:
        """How many of ``width`` suffix tokens to append after an MTP chain of ``k``: the
        count with the most expected tokens per ms (they count only if the whole chain is
        kept; they cost the wider verify and its replays), when that beats the chain alone;
        0: none."""
        ps, e_k, all_kept, cost = self._chain(k)
        v = self._verify_table(k + 1 + width)
        p = self.acceptance(b)
        replays = self._replays(ps + [p] * width, v)
        best, best_rate = 0, e_k / cost
        gain, reach = 0.0, all_kept
        for w in range(1, width + 1):
            reach *= p
            gain += reach
            rate = (e_k + gain) / max(cost + v[k + 1 + w] - v[k + 1] + replays[k + w] - replays[k], 1e-6)
            if rate > best_rate:
                best, best_rate = w, rate
        return best

    def _fixed_acceptance(self) -> float:
        """The head's acceptance per draft as learned here (a fixed depth: no auto estimates)."""
        L = self.learned
        if L is None:
            return FIXED_MTP_PRIOR
        return (L.mtp_acc + FIXED_MTP_PRIOR * SUFFIX_PRIOR_N) / (L.mtp_reach + SUFFIX_PRIOR_N)

    def _head_acceptances(self) -> list[float]:
        """The head's acceptance by chain position: auto's estimates, else one learned rate."""
        if self._auto is not None:
            return list(self._auto.acceptances()) or [FIXED_MTP_PRIOR]
        return [self._fixed_acceptance()]

    def _head_ms(self) -> tuple[float, float]:
        """The head's catch-up (which yields its first draft) and one chained step, in ms:
        auto's measured parts, else a fixed depth's chain time shared out by its drafts."""
        if self._auto is not None:
            return self._auto.costs.sync_ms(), self._auto.costs.step_ms()
        L = self.learned
        if L is not None and L.draft_settle_ms:
            one = L.draft_settle_ms.median / max(1, self.policy.max_depth)
        else:
            one = DEFAULT_SLOPE * self.verify_ms(1)
        return one, one
