"""Adaptive draft depth: MTP's gain where it exists, never its loss.

Each round the policy picks the depth K (0 = no drafting) that maximises expected
tokens per millisecond, from what it measures on this machine and model:

* acceptance ``p_i`` of draft position i given positions < i were accepted, as
  exponentially decayed counts (recent text matters more; the prior is optimistic so a
  new model gets tried, and each position's prior is the estimate of the one before).
  A position's prior fades while the position is being reached and comes back while it
  is not: a prior that kept its weight against decayed counts would hold every estimate
  above ~3%, and where a draft costs less than that (a small model on a fast machine) a
  head whose drafts are never accepted would be drafted with forever; one that faded
  for good would leave a position not reached for a while on stale evidence;
* what a round costs at each depth (:mod:`engine.runtime.decode.policy.costs`): medians of short
  windows of whole-round wall times, so the Python around llama.cpp's calls and the
  events delivered count as much as the decodes, and one descheduled round does not
  move anything; depths not measured yet are estimated from their parts.

Expected tokens of a round of depth K: ``1 + sum_{i<=K} prod_{j<=i} p_j``.

**Converging, and staying.** A depth whose cost is only estimated is tried when it
looks best (a few rounds, then judged on its own wall time). A measured depth replaces
the current one only when it is better by more than the noise (``NOISE_SIGMAS`` standard
errors of the two windows and, between drafting and not, of the first draft's
acceptance; at least ``MIN_GAIN``) plus the transition it costs (llama.cpp rebuilds its graph when the
batch width changes), amortised over ``EXPLORE_MIN`` rounds. A neighbouring depth (one and two depths up
and down, in turn: down to K = 0, so plain decoding is re-measured too) is tried again
for ``EXPLORE_ROUNDS`` rounds every ``explore_gap`` drafting rounds, timed afresh; the
gap doubles each time the try confirms the choice, up to ``EXPLORE_MAX``, and falls back
to ``EXPLORE_MIN`` when it changes it. So with steady costs and text the policy settles in a
bounded number of rounds and then spends under 1% of its rounds on tries; when the
text or the machine changes, a better depth is found within a few tries. A depth whose
times are older than ``STALE`` steady rounds is never switched to on them: this machine
changes speed by 1.6x between stretches, and a window timed at the other speed compares
unlike with like, so it is tried (timed afresh) first.

When no depth beats plain decoding the policy stops drafting (the MTP context then
costs nothing but a copied hidden row per token) and probes with one draft every
``probe_gap`` tokens. A failed probe doubles the gap and an accepted one halves it and
is followed by another at once, so a head that never helps costs well under 1% and a
head that became good is back within a few probes. Probes weigh more than drafting
rounds in the estimate (a window of ~5 instead of ~50), and the evidence that turned
drafting off is cut to the weight of 5 observations, so fresh evidence soon replaces
it: near break-even, an unlucky stretch must not keep a head that pays switched off.
Output is unaffected: the decoder verifies whatever is drafted.
"""

from __future__ import annotations

import math
from collections import Counter

from engine.runtime.decode.policy.costs import RoundCosts
from engine.runtime.decode.policy.tuning import (
    CHOOSE_EVERY,
    DECAY,
    DEEPER,
    EXPLORE_MAX,
    EXPLORE_MIN,
    EXPLORE_ROUNDS,
    EXPLORE_SKIP,
    EXPLORE_SKIP_SHALLOW,
    FIRST_ROUNDS,
    MIN_GAIN,
    NOISE_SIGMAS,
    OFF_EVIDENCE,
    PRIOR_FLOOR,
    PRIOR_N,
    PRIOR_P,
    PROBE_DECAY,
    PROBE_MAX,
    PROBE_MIN,
    STALE,
    WINDOW,
)
from engine.runtime.decode.depth import AUTO
from engine.runtime.decode.stats import RoundStats


def expected_tokens(acceptances: list[float]) -> list[float]:
    """Expected tokens of a round drafting 0, 1, …, ``len(acceptances)`` tokens, a draft
    kept with its conditional acceptance once the ones before it were (the target's own
    next token always): 1, 1 + p1, 1 + p1 + p1·p2, …"""
    out, tokens, chain = [1.0], 1.0, 1.0
    for p in acceptances:
        chain *= p
        tokens += chain
        out.append(tokens)
    return out


class AdaptiveDepth:
    """Depth policy for ``draft_depth="auto"``. One per loaded model: what it learns
    about costs carries over between generations."""

    draft_depth = AUTO
    learns = True

    def __init__(self, max_depth: int = 8):
        if max_depth < 1:
            raise ValueError("max_depth must be >= 1")
        self.max_depth = max_depth
        self.reach = [0.0] * max_depth  # decayed rounds that reached position i
        self.acc = [0.0] * max_depth  # ... and accepted it
        self.prior_n = [PRIOR_N] * max_depth  # weight of each position's prior
        self.costs = RoundCosts(max_depth)
        self.off_tokens = 0  # tokens since drafting was switched off
        self.probe_gap = PROBE_MIN
        self.current = 0  # the chosen depth (not a try or a probe)
        self.explore_gap = EXPLORE_MIN
        self._probing = False
        self._drafting = False  # the last choice was a depth > 0 (not a probe)
        self._since_explore = 0  # drafting rounds since the last try of a neighbour
        self._unchosen = 0  # drafting rounds left before the next choice
        self._explorations = 0
        self._trying: tuple[int, int, int] | None = None  # (depth, rounds left, depth before)
        self._tried_from: int | None = None  # the try just ended: the depth it was made from
        self._first_plain = False  # plain decoding's first timing just ended (see next_depth)
        self._prev: tuple[int, float, int] | None = None  # the last round: index, t, depth
        self.depth_counts: Counter[int] = Counter()  # rounds per chosen depth (tests, GUI, bench)
        #: the policies of steps of n sequences decoding together, learned in slots and
        #: kept with this one (engine.runtime.decode.policy.steps)
        self.batch: dict[int, AdaptiveDepth] = {}
        #: an accepted probe probes again at once only where drafting could pay by the
        #: costs timed lately (:meth:`_could_pay`): a batch size's policy. Alone, this
        #: machine's changes of speed make a depth's wall time too unsure for that verdict
        #: (on the noisy recorded demo costs auto then stayed plain where depth 1 paid),
        #: and a run of accepted probes is what times depth 1 again
        self.probes_by_cost = False

    # ------------------------------------------------------------------ model
    def acceptances(self) -> list[float]:
        """Estimated conditional acceptance of each draft position. A position's prior
        is the estimate of the one before it (times :data:`DEEPER`), so a depth seldom
        drafted is assumed to behave like its neighbour until measured (not like a fixed guess)."""
        out, prior = [], PRIOR_P
        for i in range(self.max_depth):
            w = self.prior_n[i]
            prior = (self.acc[i] + prior * w) / (self.reach[i] + w)
            out.append(prior)
            prior *= DEEPER
        return out

    def verify_ms(self, rows: int) -> float:
        """Measured or estimated verify time of ``rows`` rows."""
        return self.costs.verify_ms(rows)

    def rates(self, *, parts: bool = False) -> list[float]:
        """Expected tokens per ms of a steady round at each depth 0..max_depth (``parts``:
        every depth's cost from its parts, measured walls aside, so depths compare on
        the same footing whatever speed the machine ran at when each was last timed)."""
        cost = self.costs.parts_ms if parts else self.costs.round_ms
        return [tokens / cost(k) for k, tokens in enumerate(expected_tokens(self.acceptances()))]

    def _could_pay(self) -> bool:
        """Drafting would beat plain decoding at some depth timed lately if every draft
        were accepted. Where it would not (drafting was turned off for its cost, not its acceptance: a
        verify of several sequences' rows on a compute-bound machine), an accepted probe
        says nothing new, and probes back off as failed ones do."""
        c = self.costs
        # depths timed lately: estimates are optimistic, and a wall time older than STALE
        # may be of another speed of the machine (then probes go on, and time depth 1 again)
        timed = [k for k in range(1, self.max_depth + 1) if c.measured(k) and c.age(k) <= STALE]
        if not timed or not c.measured(0):
            return True
        plain = 1.0 / c.round_ms(0)
        return any((k + 1) / c.round_ms(k) > plain for k in timed)

    def best_depth(self) -> int:
        rates = self.rates()
        return max(range(len(rates)), key=rates.__getitem__)

    def _choose(self) -> int:
        """The depth to run at: the best one, when it beats the current one by more than
        the noise and the switch, or has not been measured yet."""
        rates = self.rates()
        # until the first draft position is measured, a fresh policy drafts one token a round:
        # the cheapest round that measures it (at near-zero acceptance a deeper one only costs more)
        deepest = len(rates) - 1 if self.reach[0] >= FIRST_ROUNDS else 1
        best = max(range(deepest + 1), key=rates.__getitem__)
        cur = self.current
        c = self.costs
        if self._first_plain and self._trying is None:
            # the first time plain decoding and drafting have both been timed: neither is
            # an established choice to defend yet, so the better one is taken as it stands
            self._first_plain = False
            cur = best
        if best != cur and c.measured(best):
            err = c.rel_error(best) ** 2 + c.rel_error(cur) ** 2
            if 0 in (best, cur):  # drafting or not: the first draft's acceptance decides
                p, n = self.acceptances()[0], self.reach[0] + self.prior_n[0]
                err += p * (1 - p) / n / (1 + p) ** 2
            noise = max(MIN_GAIN, NOISE_SIGMAS * err**0.5)
            switch = c.switch_ms(best) / (EXPLORE_MIN * c.round_ms(best))
            if rates[best] <= rates[cur] * (1 + noise + switch):
                best = cur
            elif c.age(best) > STALE:
                # judged on old times (the machine may have changed speed since): measure
                # it again next to the current depth before switching
                self._try(best, cur)
                return best
        if self._tried_from is not None:  # a try just ended: did it change the choice?
            self.explore_gap = EXPLORE_MIN if best != self._tried_from else min(self.explore_gap * 2, EXPLORE_MAX)
            self._tried_from = None
        self.current = best
        return best

    def estimates(self) -> AdaptiveDepth:
        """The policy whose estimates price a round's plan (engine.runtime.decode.policy.planner)."""
        return self

    # ---------------------------------------------------------------- policy
    @property
    def probing(self) -> bool:
        """The last choice was a probe (one draft while drafting is off)."""
        return self._probing

    def forget_last_round(self) -> None:
        """The next round observed does not follow the last one seen (others ran between):
        no wall time is taken across them."""
        self._prev = None

    @property
    def idle(self) -> bool:
        return (
            not self._drafting
            and bool(self.depth_counts)
            and 1 in self.costs.verify
            and self.off_tokens < self.probe_gap
        )

    def next_depth(self) -> int:
        self._probing = False
        if self._trying is not None:  # a neighbour's try, to its end
            k, left, before = self._trying
            self._trying = (k, left - 1, before) if left > 1 else None
            if self._trying is None:
                self._tried_from = before
                self.current = before
                self._unchosen = 0
            self.depth_counts[k] += 1
            return k
        if self._unchosen > 0 and self._drafting:  # the common round: the choice stands
            self._unchosen -= 1
            k = self.current
        elif 1 not in self.costs.verify and self.costs.verify:
            # measure plain decoding once (every ratio is relative to it), as a try: drafting
            # goes on after it. Switched off for it, a fresh session waited for a probe
            # with the evidence for drafting cut, and stayed plain where depth 1 paid.
            k = self._try(0, self.current)
            self._first_plain = True  # ... and the choice after it is made without hysteresis
            self.depth_counts[k] += 1
            return k
        elif not self._drafting and self.depth_counts and self.off_tokens < self.probe_gap:
            # drafting is off and no probe is due: only a probe brings news about the
            # drafts, so the choice is made again then (this round costs no estimate)
            k = 0
        else:
            self._unchosen = CHOOSE_EVERY - 1
            k = self._choose()
            if self._trying is not None:  # the choice is a try first
                self.depth_counts[k] += 1
                return k
        if k == 0:
            if self._drafting:
                self._drafting = False
                self._forget_down_to(OFF_EVIDENCE)
            if self.off_tokens >= self.probe_gap:
                self._probing = True
                k = 1
        else:
            self._drafting = True
            self._since_explore += 1
            if self._since_explore >= self.explore_gap:
                k = self._explore(k)
        self.depth_counts[k] += 1
        return k

    def _explore(self, k: int) -> int:
        """Try the next of ``k``'s neighbours, in turn one and two depths up and down (so a
        depth last timed while the machine ran at another speed is timed again). A deeper
        neighbour is tried only when it might win: one whose rate from its parts (measured
        decode costs, the acceptance estimates) is more than :data:`EXPLORE_SKIP` below
        ``k``'s is passed over, and with none left the turn confirms ``k`` as a try would
        (a fresh session spent a quarter of its first rounds trying deeper depths its own
        estimates already ruled out). Shallower ones, plain decoding among them, are the
        safety net that corrects a choice made on bad timings, so they are passed over only
        on a full window of their own verify times (a few slow first samples are outvoted
        first) and more than :data:`EXPLORE_SKIP_SHALLOW` below (on the demo, where
        depth 1 earns ~45% more than plain, a fresh session's plain tries cost ~4% of its
        first 1,000 tokens). A deeper one whose wall times are older than :data:`STALE`
        is tried whatever its estimate: its figures (walls and verifies alike) may be of
        another speed of the machine, in this session or the one that saved them, and
        would otherwise rule it out for good (a policy saved after a slow benchmark kept
        steps of four sequences at depths 1-2, 0.8x depth 3)."""
        self._since_explore = 0
        near = [d for d in (k + 1, k - 1, k + 2, k - 2) if 0 <= d <= self.max_depth]
        rates = self.rates(parts=True)
        for _ in range(len(near)):
            d = near[self._explorations % len(near)]
            self._explorations += 1
            if d < k:  # skipped only on a full window of its own verify times
                w = self.costs.verify.get(d + 1)
                skip = EXPLORE_SKIP_SHALLOW if w is not None and len(w) >= WINDOW else 0.0
            elif self.costs.measured(d) and self.costs.age(d) > STALE:
                skip = 0.0  # its figures are old: timed at another speed, they would rule it out for good
            else:
                skip = EXPLORE_SKIP
            if skip == 0.0 or rates[d] >= rates[k] * (1 - skip):
                return self._try(d, k)
        self.explore_gap = min(self.explore_gap * 2, EXPLORE_MAX)
        return k

    def _try(self, k: int, before: int) -> int:
        """Run ``EXPLORE_ROUNDS`` rounds at ``k`` (this one included), timed afresh."""
        self._trying = (k, EXPLORE_ROUNDS - 1, before)
        self.costs.forget(k)
        return k

    def _forget_down_to(self, n: float) -> None:
        """Keep each position's estimate but make it worth at most ``n`` observations."""
        for i, reach in enumerate(self.reach):
            if reach > n:
                self.acc[i] *= n / reach
                self.reach[i] = n

    def observe(self, r: RoundStats) -> None:
        self.observe_costs(r, r.index, r.t)
        self.observe_drafts(r)

    def observe_costs(self, r: RoundStats, index: int, t: float, *, typical: bool = True) -> None:
        """What round ``r`` (``index``, ending at ``t`` seconds) cost: its parts, and its
        wall time when the round before it (``index`` - 1, on the same clock) was seen. A
        round that is not ``typical`` of its depth (a step that carried another
        sequence's prompt rows too) only marks where the next one starts."""
        prev = self._prev
        wall = steady = None
        if prev is not None and index == prev[0] + 1:  # the round after the last one seen
            wall, steady = (t - prev[1]) * 1000, r.depth == prev[2]
        self._prev = (index, t, r.depth)
        if typical:
            self.costs.add(r, wall, bool(steady))

    def observe_drafts(self, r: RoundStats, *, probing: bool | None = None, spacing: bool = True) -> None:
        """What round ``r``'s drafts earned: the acceptance estimates and, with
        ``spacing``, the probes' spacing while drafting is off. ``probing``: whether the
        choice that made ``r`` was a probe (default: the last choice's)."""
        probing = self._probing if probing is None else probing
        if r.drafted:
            decay = PROBE_DECAY if probing else DECAY
            reached, a = min(r.drafted, r.accepted + 1), r.accepted
            reach, acc, prior = self.reach, self.acc, self.prior_n
            for i in range(self.max_depth):
                w = prior[i]
                if i < reached:
                    reach[i] = reach[i] * decay + 1.0
                    acc[i] = acc[i] * decay + (1.0 if i < a else 0.0)
                    prior[i] = max(w * decay, PRIOR_FLOOR)
                else:
                    reach[i] *= decay
                    acc[i] *= decay
                    prior[i] = PRIOR_N - (PRIOR_N - w) * decay
        if not spacing:
            return
        if r.depth == 0:
            self.off_tokens += r.emitted
        elif probing:
            if r.accepted and (not self.probes_by_cost or self._could_pay()):
                # drafts may have become good: probe again at once
                self.probe_gap = max(self.probe_gap // 2, PROBE_MIN)
                self.off_tokens = self.probe_gap
            else:
                self.probe_gap = min(self.probe_gap * 2, PROBE_MAX)
                self.off_tokens = 0
        else:
            self.off_tokens = 0
            self.probe_gap = PROBE_MIN

    def for_batch(self, n: int) -> AdaptiveDepth:
        """The policy of steps of ``n`` sequences decoding together (slots:
        engine.runtime.decode.policy.steps). Made the first time from what this one knows of
        the head (acceptance by position, its depth), with step costs to measure afresh: a
        round's cost alone says little of a step's (on a compute-bound machine four
        sequences' verify rows cost four times one's, and a depth that paid alone loses)."""
        p = self.batch.get(n)
        if p is None:
            p = self._restore(self.max_depth, self.state(batch=False)) or AdaptiveDepth(self.max_depth)
            p.costs = RoundCosts(self.max_depth)
            p.probes_by_cost = True
            self.batch[n] = p
        return p

    # ------------------------------------------------------------- persistence
    #: what is learned (the rest is per-generation bookkeeping)
    _LEARNED = ("reach", "acc", "prior_n", "off_tokens", "probe_gap", "current", "explore_gap", "_drafting")

    def state(self, *, batch: bool = True) -> dict:
        """What this policy has learned, as plain JSON (engine.runtime.decode.policy.store);
        with ``batch``, its batch sizes' policies too."""
        out = {k: getattr(self, k) for k in self._LEARNED}
        out["max_depth"] = self.max_depth
        out["costs"] = self.costs.state()
        if batch and self.batch:
            out["batch"] = {str(n): p.state(batch=False) for n, p in list(self.batch.items())}
        return out

    @classmethod
    def from_state(cls, max_depth: int, state: object) -> AdaptiveDepth:
        """A policy that starts from ``state``; a fresh one when it does not fit. Its
        batch sizes' policies come along, those that fit."""
        policy = cls._restore(max_depth, state) or cls(max_depth)
        batch = state.get("batch") if isinstance(state, dict) else None
        if isinstance(batch, dict):
            for n, s in batch.items():
                p = cls._restore(max_depth, s) if isinstance(n, str) and n.isdigit() and int(n) >= 2 else None
                if p is not None:
                    p.probes_by_cost = True
                    policy.batch[int(n)] = p
        return policy

    @classmethod
    def _restore(cls, max_depth: int, state: object) -> AdaptiveDepth | None:
        """The policy ``state`` describes (its own part), or None when it does not fit."""
        policy = cls(max_depth)
        try:
            if not isinstance(state, dict) or state.get("max_depth") != max_depth:
                return None
            for key in ("reach", "acc", "prior_n"):
                values = [float(x) for x in state[key]]
                if len(values) != max_depth or not all(math.isfinite(x) and x >= 0 for x in values):
                    return None
                setattr(policy, key, values)
            policy.costs = RoundCosts.from_state(max_depth, state["costs"])
            policy.off_tokens = int(state["off_tokens"])
            policy.probe_gap = min(max(int(state["probe_gap"]), PROBE_MIN), PROBE_MAX)
            policy.current = min(max(int(state["current"]), 0), max_depth)
            policy.explore_gap = min(max(int(state["explore_gap"]), EXPLORE_MIN), EXPLORE_MAX)
            policy._drafting = bool(state["_drafting"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return policy
