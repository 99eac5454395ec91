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
from scratch: a round's cost alone says little of a step's. The model's policy keeps them (:attr:`AdaptiveDepth.batch`), so they are
saved and loaded with it (engine.runtime.decode.policy.store).

Not modelled: one depth serves every sequence of a step, so a sequence whose drafts are
accepted far less often than the others' drafts as deep as they do (the pooled
acceptance is what decides).
"""

from __future__ import annotations

import threading

from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.costs import RoundCosts
from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.stats import RoundStats
from engine.runtime.slots.batcher import Batcher


class StepDepth:
    """The depth of every step of ``n`` sequences (one per batch size and model)."""

    def __init__(self, policy: AdaptiveDepth, n: int):
        self.policy = policy
        self.n = n
        self._lock = threading.Lock()  # the sequences' threads ask and tell at once
        self._step = -1  # the target step the current choice was made after
        self._depth = 0
        self._choices = 0  # choices made: a round's index
        self._probes = [False, False]  # whether the last two choices were probes (by index % 2)
        self._timed = -1  # the choice whose round was last timed ...
        self._seen = -1  # ... and the target step it ended with

    def depth(self, step: int) -> tuple[int, int]:
        """The depth of the round that starts after target step ``step``, and the
        choice's index: chosen by the first sequence to ask, the same for the others."""
        with self._lock:
            if step != self._step:
                if step != self._seen:  # steps of other sizes ran since its last round
                    self.policy._prev = None  # no wall time across them
                self._step, self._depth = step, self.policy.next_depth()
                self._choices += 1
                self._probes[self._choices % 2] = self.policy._probing
            return self._depth, self._choices

    def observe(self, r: RoundStats, choice: int, step: int, step_t: float) -> None:
        """Round ``r`` of one sequence, of the ``choice``-th choice, ending with target
        step ``step`` at ``step_t`` (the batcher's clock). Every sequence's drafts teach
        acceptance; the round's time is taken once, from the first of them: consecutive
        choices' ends are one step's period, replays after a rejection included. A step
        whose verify carried other rows than every sequence's at this depth (a joining
        request's prompt chunk, a sequence drafting less near its end) is not timed."""
        with self._lock:
            p = self.policy
            first = choice != self._timed
            if first:
                self._timed, self._seen = choice, step
                typical = r.step_rows == self.n * (r.depth + 1) or not r.step_rows
                p.observe_costs(r, choice, step_t, typical=typical)
            # a sequence may tell of its round after another asked the next choice: the
            # round is judged as its own choice's (a probe or not), and the probes'
            # spacing counts a step once (its first sequence's tokens and probe verdict),
            # so a step of n sequences probes as often as a round alone
            p.observe_drafts(r, probing=self._probes[choice % 2], spacing=first)


_MAKING = threading.Lock()


class BatchDepth:
    """A slot's depth policy for one generation: ``inner`` (the model's auto policy)
    while it decodes alone, the model's :class:`StepDepth` for the batch size (kept in
    ``steppers`` by the slots' pool) while others decode with it."""

    def __init__(self, inner: DepthPolicy, batcher: Batcher, steppers: dict[int, StepDepth]):
        self.inner = inner
        self.batcher = batcher
        self.steppers = steppers
        self.draft_depth = inner.draft_depth
        self.max_depth = inner.max_depth
        self.learns = inner.learns
        #: what chose the last round: None (``inner``) or the step policy and its choice
        self._used: tuple[StepDepth, int] | None = None

    def _stepper(self) -> StepDepth | None:
        n = self.batcher.active
        inner = self.inner
        if n <= 1 or not isinstance(inner, AdaptiveDepth):
            return None
        s = self.steppers.get(n)
        if s is not None and s.policy is inner.batch.get(n):
            return s
        with _MAKING:  # the sequences' threads ask at once: one policy per batch size
            return self._make(inner, n)

    def _make(self, inner: AdaptiveDepth, n: int) -> StepDepth:
        p = inner.batch.get(n)
        if p is None:
            # it starts from what the model's policy knows of the head (its acceptance, its
            # depth) and measures what steps of n sequences cost: a round's cost alone says
            # little of a step's (on a compute-bound machine 4 sequences' verify rows cost
            # 4x one's, a deep depth that paid alone then loses)
            p = AdaptiveDepth.from_state(inner.max_depth, inner.state(batch=False))
            p.costs = RoundCosts(inner.max_depth)
            p.probes_by_cost = True
            inner.batch[n] = p
        s = self.steppers.get(n)
        if s is None or s.policy is not p:
            s = self.steppers[n] = StepDepth(p, n)
        return s

    @property
    def idle(self) -> bool:
        s = self._stepper()
        return s.policy.idle if s is not None else self.inner.idle

    def next_depth(self) -> int:
        s = self._stepper()
        if s is None:
            if self._used is not None and isinstance(self.inner, AdaptiveDepth):
                self.inner._prev = None  # its last round was not the one before this: no wall time across
            self._used = None
            return self.inner.next_depth()
        depth, choice = s.depth(self.batcher.steps)
        self._used = (s, choice)
        return depth

    def observe(self, r: RoundStats) -> None:
        if self._used is None:
            self.inner.observe(r)
        else:
            s, choice = self._used
            s.observe(r, choice, self.batcher.steps, self.batcher.step_t)
