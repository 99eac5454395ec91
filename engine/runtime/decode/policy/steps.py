"""Draft depth while several sequences decode together: one choice per step.

Alone, a sequence's depth is the model's own auto policy's
(:mod:`engine.runtime.decode.policy.adaptive`). With others, every round of it lasts a
whole step — the MTP decodes drafting for every sequence, then one target decode of
every sequence's rows — so what a depth costs depends on how many sequences share the
step, and a draft that pays alone may not pay at four: llama.cpp's kernels cost nearly
the same for one row or four on a memory-bound machine, and a deeper draft makes every
sequence wait.

So the model keeps one adaptive policy per number of sequences decoding (2, 3, …:
:class:`StepDepth`), shared by its slots, and that policy chooses **the step's depth**:
the first sequence to ask after a step gets the policy's choice and every other sequence
of that step gets the same. Its rounds are steps: wall times are the periods between the
ends of consecutive target decodes (the batcher's clock), so a depth's cost is the whole
step's at that depth, and its acceptance is pooled from every sequence's drafts. The
policy's rule — the depth (0 allowed) with the most expected tokens per millisecond —
is then the step's goodput, every sequence's tokens over the step's time; where no depth
beats plain decoding for that batch size it stops drafting and probes, as auto does alone.
Choosing once per step is what makes the measurements clean: a try of another depth is
every sequence's at once, so the step it times is the step that depth makes (each slot
trying depths of its own timed steps whose cost the others' depths set).

A policy for a batch size starts from what the model's own policy has learned of the
head (acceptance by draft position, its depth) and measures what steps of its size cost
from scratch: a round's cost alone says little of a step's. The model's policy keeps
them (:attr:`AdaptiveDepth.batch`), so they are saved and loaded with it
(engine.runtime.decode.policy.store).

A sequence whose own drafts are accepted far less often than the others' may cost the
step more by its draft rows than they earn: it then sits the step's drafting out and
decodes plainly (:class:`OwnDrafts`), by the same goodput — the step's expected tokens
over its time, with the rows' share of it from the target decodes' times by total rows.
"""

from __future__ import annotations

import threading
from typing import Protocol

from engine.runtime.decode.policy.adaptive import AdaptiveDepth, expected_tokens
from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.policy.costs import RoundCosts
from engine.runtime.decode.policy.tuning import (
    CHOOSE_EVERY,
    OWN_DECAY,
    OWN_PRIOR_N,
    PROBE_DECAY,
    SIT_OUT_MARGIN,
    SIT_OUT_PROBE_MAX,
    SIT_OUT_PROBE_MIN,
)
from engine.runtime.decode.stats import RoundStats


class StepClock(Protocol):
    """What the depth of steps reads of the loop that runs them (the slots' batcher:
    engine.runtime.slots.batcher.Batcher)."""

    #: sequences taking part in the steps now
    active: int
    #: target steps run so far, and when the last one ended (perf_counter seconds)
    steps: int
    step_t: float
    #: the target decodes' times by total rows (every sequence's)
    verify_costs: RoundCosts


class StepDepth:
    """The depth of every step of ``n`` sequences (one per batch size and model)."""

    def __init__(self, policy: AdaptiveDepth, n: int):
        self.policy = policy
        self.n = n
        self._lock = threading.Lock()  # sequences ask and tell on the engine thread; uncontended, kept for safety
        self._step = -1  # the target step the current choice was made after
        self._depth = 0
        self._choices = 0  # choices made: a round's index
        self._probes = [False, False]  # whether the last two choices were probes (by index % 2) ...
        self._depths = [0, 0]  # ... their depths ...
        self._less = [0, 0]  # ... and the draft rows sequences that sat them out left out
        self._timed = -1  # the choice whose round was last timed ...
        self._seen = -1  # ... and the target step it ended with

    def depth(self, step: int) -> tuple[int, int]:
        """The depth of the round that starts after target step ``step``, and the
        choice's index: chosen by the first sequence to ask, the same for the others."""
        with self._lock:
            if step != self._step:
                if step != self._seen:  # steps of other sizes ran since its last round
                    self.policy.forget_last_round()
                self._step, self._depth = step, self.policy.next_depth()
                self._choices += 1
                c = self._choices % 2
                self._probes[c], self._depths[c], self._less[c] = self.policy.probing, self._depth, 0
            return self._depth, self._choices

    @property
    def last_depth(self) -> int:
        """The depth of the last step it chose (/metrics, the Server page)."""
        return self._depth

    def sit_out(self, choice: int, depth: int) -> None:
        """A sequence decodes plainly in the ``choice``-th choice's step instead of
        drafting ``depth`` (its drafts do not pay for their rows: :class:`OwnDrafts`)."""
        with self._lock:
            self._less[choice % 2] += depth

    @property
    def rows_left_out(self) -> int:
        """Draft rows the sequences that sat out the last complete choice left out."""
        return self._less[(self._choices - 1) % 2]

    def observe(self, r: RoundStats, choice: int, step: int, step_t: float) -> None:
        """Round ``r`` of one sequence, of the ``choice``-th choice, ending with target
        step ``step`` at ``step_t`` (the batcher's clock). Every sequence's drafts teach
        acceptance; the round's time is taken once, from the first of them: consecutive
        choices' ends are one step's period, replays after a rejection included. A step
        whose verify carried other rows than every sequence's at this depth, less those
        of the sequences that sat it out (a joining request's prompt chunk, a sequence
        drafting less near its end), is not timed."""
        with self._lock:
            p = self.policy
            c = choice % 2
            # the first to tell of it among the sequences that drafted the step's depth (a
            # sequence that sat it out has no draft to tell of, nor the step's parts)
            first = choice != self._timed and r.depth == self._depths[c]
            if first:
                self._timed, self._seen = choice, step
                rows = self.n * (r.depth + 1) - self._less[c]
                p.observe_costs(r, choice, step_t, typical=r.step_rows == rows or not r.step_rows)
            # a sequence may tell of its round after another asked the next choice: the
            # round is judged as its own choice's (a probe or not), and the probes'
            # spacing counts a step once (its first sequence's tokens and probe verdict),
            # so a step of n sequences probes as often as a round alone
            p.observe_drafts(r, probing=self._probes[choice % 2], spacing=first)


class OwnDrafts:
    """One sequence's own acceptance in steps, and whether its drafts pay for their rows.

    The step's depth is chosen by the acceptance of all its sequences. A sequence whose
    own drafts are accepted far less often than the others' may lose the step more by its
    draft rows (a verify of more rows costs more, on a compute-bound machine about in
    proportion) than its drafts earn; it then decodes plainly in those steps ("sits
    out"), when the step's goodput — every sequence's expected tokens over the step's
    time — is higher without its drafts by more than :data:`SIT_OUT_MARGIN`. The step's
    time at the depth is its measured wall time, and the rows' share of it the verify
    times of the model's target decodes by total rows (:attr:`StepClock.verify_costs`).
    While it sits out its acceptance is not seen, so it drafts every ``gap`` steps
    (doubling up to :data:`SIT_OUT_PROBE_MAX` while the verdict stands); the evidence that
    made it sit out is cut to a few rounds' worth, each draft while out weighs as a probe
    does alone, and an accepted one has the verdict made again at once."""

    def __init__(self, prior: list[float]):
        self.reach = [OWN_PRIOR_N] * len(prior)
        self.acc = [OWN_PRIOR_N * p for p in prior]
        self.out = False
        self._unchosen = 0
        self._sat = 0  # steps sat out since this sequence last drafted
        self._gap = SIT_OUT_PROBE_MIN

    def tokens(self, depth: int) -> float:
        return expected_tokens([a / r if r > 0 else 0.0 for a, r in zip(self.acc[:depth], self.reach)])[-1]

    def observe(self, r: RoundStats) -> None:
        if not r.drafted:
            return
        decay = PROBE_DECAY if self.out else OWN_DECAY  # while it sits out, each draft is news
        reached = min(r.drafted, r.accepted + 1)
        for i in range(min(reached, len(self.reach))):
            self.reach[i] = self.reach[i] * decay + 1.0
            self.acc[i] = self.acc[i] * decay + (1.0 if i < r.accepted else 0.0)
        if self.out and r.accepted:  # its drafts may have become good: judge again at once
            self._unchosen, self._gap = 0, SIT_OUT_PROBE_MIN

    def sits_out(self, depth: int, step: StepDepth, verify: RoundCosts) -> bool:
        """Whether this sequence decodes plainly in a step of ``depth``."""
        if self.out and self._sat >= self._gap:  # draft once: is its acceptance still as low?
            self._sat, self._gap = 0, min(self._gap * 2, SIT_OUT_PROBE_MAX)
            return False
        if self._unchosen > 0:
            self._unchosen -= 1
        else:
            self._unchosen = CHOOSE_EVERY - 1
            out = self._judge(depth, step, verify)
            if out != self.out:
                self.out, self._sat, self._gap = out, 0, SIT_OUT_PROBE_MIN
                if out:  # what made it sit out is worth a few rounds: its drafts while out soon outweigh it
                    for i, reach in enumerate(self.reach):
                        if reach > OWN_PRIOR_N:
                            self.acc[i] *= OWN_PRIOR_N / reach
                            self.reach[i] = OWN_PRIOR_N
        self._sat += self.out
        return self.out

    def _judge(self, depth: int, step: StepDepth, verify: RoundCosts) -> bool:
        p, n = step.policy, step.n
        if not p.costs.measured(depth) or not verify.verify:
            return False
        # a step at this depth as it has run lately (its sit-outs included), and its verify
        wall, part = p.costs.round_ms(depth), p.costs.verify_ms(depth + 1)
        rows = n * (depth + 1) - step.rows_left_out
        # what this sequence's draft rows add to that verify: the share the target decodes'
        # times by total rows give them (a share, not their difference in ms: those times
        # come from other moments, and this machine changes speed between them)
        if self.out:  # it sits out: drafting would add its rows
            big, small = verify.verify_ms(rows + depth), verify.verify_ms(rows)
        else:
            big, small = verify.verify_ms(rows), verify.verify_ms(rows - depth)
        share = max(0.0, 1.0 - small / big) if big > 0 else 0.0
        if self.out:
            w_out = wall
            w_in = wall + part * share / (1.0 - share) if share < 1.0 else float("inf")
        else:
            w_in = wall
            w_out = wall - min(part, wall) * share
        if w_out <= 0:
            return False
        others = (n - 1) * expected_tokens(p.acceptances()[:depth])[-1]
        return (others + 1.0) / w_out > (others + self.tokens(depth)) / w_in * (1 + SIT_OUT_MARGIN)


_MAKING = threading.Lock()


class SteppedDepth:
    """A slot's depth policy for one generation: ``inner`` (the model's auto policy)
    while it decodes alone, the model's :class:`StepDepth` for the batch size (kept in
    ``steppers`` by the slots' pool) while others decode with it."""

    def __init__(self, inner: DepthPolicy, batcher: StepClock, steppers: dict[int, StepDepth]):
        self.inner = inner
        self.batcher = batcher
        self.steppers = steppers
        self.draft_depth = inner.draft_depth
        self.max_depth = inner.max_depth
        self.learns = inner.learns
        #: what chose the last round: None (``inner``) or the step policy and its choice
        self._used: tuple[StepDepth, int] | None = None
        self._own: OwnDrafts | None = None  # made at its first step beside others

    def _stepper(self) -> StepDepth | None:
        n = self.batcher.active
        inner = self.inner
        if n <= 1 or not isinstance(inner, AdaptiveDepth):
            return None
        s = self.steppers.get(n)
        if s is not None and s.policy is inner.batch.get(n):
            return s
        with _MAKING:  # one policy per batch size, whoever asks first
            return self._make(inner, n)

    def _make(self, inner: AdaptiveDepth, n: int) -> StepDepth:
        p = inner.for_batch(n)
        s = self.steppers.get(n)
        if s is None or s.policy is not p:
            s = self.steppers[n] = StepDepth(p, n)
        return s

    def estimates(self) -> AdaptiveDepth | None:
        """Auto's policy whose estimates price this round's plan: the model's own while this
        sequence decodes alone (as a model without slots did). Beside others, None: the
        planner prices the chain by the verify and draft times it measures by the step's rows
        (a step size's policy times whole steps at its depth, not a sequence's own rows)."""
        if self._stepper() is None and isinstance(self.inner, AdaptiveDepth):
            return self.inner
        return None

    @property
    def idle(self) -> bool:
        s = self._stepper()
        return s.policy.idle if s is not None else self.inner.idle

    def next_depth(self) -> int:
        s = self._stepper()
        if s is None:
            if self._used is not None and isinstance(self.inner, AdaptiveDepth):
                self.inner.forget_last_round()  # steps with others ran since its last round
            self._used = None
            return self.inner.next_depth()
        depth, choice = s.depth(self.batcher.steps)
        self._used = (s, choice)
        if depth:
            own = self._own
            if own is None:
                own = self._own = OwnDrafts(s.policy.acceptances())
            if own.sits_out(depth, s, self.batcher.verify_costs):
                s.sit_out(choice, depth)
                return 0
        return depth

    def observe(self, r: RoundStats) -> None:
        if self._used is None:
            self.inner.observe(r)
        else:
            s, choice = self._used
            s.observe(r, choice, self.batcher.steps, self.batcher.step_t)
            if self._own is not None:
                self._own.observe(r)
