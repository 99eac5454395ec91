"""Draft depth while several sequences decode together.

Alone, a sequence's depth is the model's own auto policy's
(:mod:`engine.runtime.decode.policy.adaptive`). With others, every round of it lasts a
whole step — the target decode of every sequence's rows and the MTP decodes drafting for
all of them — so what a depth costs depends on how many sequences share the step, and a
draft that pays alone may not pay at four: llama.cpp's kernels cost nearly the same for
one row or four on a memory-bound machine, and a deeper draft makes every sequence wait.

So each slot keeps one adaptive policy per number of sequences decoding (2, 3, …): the
same rule as auto — the depth (0 allowed) with the most expected tokens per millisecond,
from the acceptance it measures and the round wall times it measures — where those wall
times are steps of that many sequences. A policy for a batch size starts from what the
model's own policy has learned (acceptance, whether drafting pays, its costs alone) and
re-measures the costs in steps of its size; where no depth beats plain decoding for that batch size it stops drafting and
probes, as auto does alone. Each sequence maximises its tokens per millisecond of the
steps it shares; with every sequence doing so on the same steps, that is the steps'
goodput when their acceptance is alike (a sequence whose deep drafts slow others more
than they earn is not charged for it: not modelled).
"""

from __future__ import annotations

from collections.abc import Callable

from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.stats import RoundStats


class BatchDepth:
    """A slot's depth policy for one generation: ``inner`` (the model's auto policy)
    while it decodes alone, ``by_n[n]`` (kept by the slot across generations) while
    ``n`` sequences decode."""

    def __init__(self, inner: DepthPolicy, by_n: dict[int, AdaptiveDepth], active: Callable[[], int]):
        self.inner = inner
        self.by_n = by_n
        self.active = active
        self.draft_depth = inner.draft_depth
        self.max_depth = inner.max_depth
        self.learns = inner.learns
        self._used: DepthPolicy | None = None  # the policy that chose the last round

    def _policy(self) -> DepthPolicy:
        n = max(1, self.active())
        if n == 1:
            return self.inner
        p = self.by_n.get(n)
        if p is None:
            # it starts from what the model's policy knows (the head's acceptance, whether
            # drafting pays, the costs alone) and measures its own round times from there
            state = self.inner.state() if isinstance(self.inner, AdaptiveDepth) else None
            p = self.by_n[n] = AdaptiveDepth.from_state(self.max_depth, state)
        return p

    @property
    def idle(self) -> bool:
        return self._policy().idle

    def next_depth(self) -> int:
        p = self._policy()
        if p is not self._used and isinstance(p, AdaptiveDepth):
            p._prev = None  # its last round was not the one before this: no wall time across
        self._used = p
        return p.next_depth()

    def observe(self, r: RoundStats) -> None:
        if self._used is not None:
            self._used.observe(r)
