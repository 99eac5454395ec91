"""Which drafts the target accepts: one rule for greedy, sampled and rejection-sampled
speculation.

After a verify batch over ``[id_last, d1..dK]`` at positions ``pos0..``, row ``i`` of
the target's logits is its distribution for the token after ``d_i`` (row 0: after
``id_last``). :func:`accept` returns ``(a, next)``: the first ``a`` drafts are kept and
``next`` is the target's own token after them (the "bonus" token every round emits).
Every rule emits exactly what the target would have, token for token (greedy, argmax
drafts) or in distribution (sampled drafts):

* greedy: keep drafts while ``d_{i+1} == argmax(row i)``; ``next`` is the argmax after;
* sampling with argmax drafts: sample the target at each verified position (the same
  draw plain sampling makes there, :mod:`engine.runtime.decode.sampling`) and keep the
  draft while they agree — Leviathan et al. with a one-hot proposal;
* sampled drafts (``draft_q`` given): accept ``d`` with probability ``min(1, p(d)/q(d))``,
  at the first rejection draw from the residual ``max(0, p - q)``, normalised.

With a grammar (:class:`~engine.runtime.decode.grammar.Constraint`) every row is first
decided the way constrained plain decoding decides it — a forced token is taken as is,
otherwise the choice is made from the masked row (and the masked distribution ``p`` for
rejection sampling) — and the matcher consumes exactly the tokens kept plus ``next``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from engine.runtime.decode.grammar import Constraint
from engine.runtime.decode.sampling import ACCEPT, RESIDUAL, Sampler


class Rows(Protocol):
    """The target's output rows of the last verify batch (a Context)."""

    def logits(self, i: int) -> np.ndarray: ...

    def argmax_rows(self, n: int) -> list[int]: ...


def accept(
    rows: Rows,
    drafts: Sequence[int],
    sampler: Sampler,
    pos0: int,
    draft_q: Sequence[np.ndarray] | None = None,
    constraint: Constraint | None = None,
) -> tuple[int, int]:
    """``(accepted drafts, next token)`` for ``drafts`` verified at ``pos0`` (the
    position of the token before them). ``draft_q``: the distribution each draft was
    sampled from (rejection sampling); None: the drafts are the head's argmax."""
    if constraint is not None:
        if draft_q is None or sampler.params.greedy:
            return _constrained(rows, drafts, sampler, pos0, constraint)
        return _constrained_rejection(rows, drafts, sampler, pos0, draft_q, constraint)
    if sampler.params.greedy:
        targets = rows.argmax_rows(len(drafts) + 1)
        a = 0
        while a < len(drafts) and drafts[a] == targets[a]:
            a += 1
        return a, targets[a]
    if draft_q is None:
        return _sample_and_compare(rows, drafts, sampler, pos0)
    return _rejection(rows, drafts, sampler, pos0, draft_q)


def _sample_and_compare(rows: Rows, drafts: Sequence[int], sampler: Sampler, pos0: int) -> tuple[int, int]:
    """Accepts draft d with probability p(d) and otherwise draws from p without d: the
    target distribution exactly, and the very tokens plain sampling draws."""
    a = 0
    while True:
        t = sampler.sample(rows.logits(a), pos0 + 1 + a)
        if a < len(drafts) and drafts[a] == t:
            a += 1
            continue
        return a, t


def _rejection(
    rows: Rows, drafts: Sequence[int], sampler: Sampler, pos0: int, draft_q: Sequence[np.ndarray]
) -> tuple[int, int]:
    """Both p and q are the truncated, renormalised distributions plain sampling uses;
    after K acceptances the next token is drawn from p."""
    for a, d in enumerate(drafts):
        pos = pos0 + 1 + a
        p = sampler.dense(rows.logits(a))
        q = draft_q[a]
        if q[d] > 0 and sampler.uniform(pos, ACCEPT) * q[d] < p[d]:
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        return a, sampler.sample_dense(residual / total if total > 0 else p, pos, RESIDUAL)
    k = len(drafts)
    return k, sampler.sample(rows.logits(k), pos0 + 1 + k)


def _constrained(rows: Rows, drafts: Sequence[int], sampler: Sampler, pos0: int, c: Constraint) -> tuple[int, int]:
    """Greedy or sample-and-compare under a grammar: each row decided as constrained
    plain decoding decides it (``Sampler.sample`` is the argmax when greedy)."""
    a = 0
    while True:
        t = c.choose(rows.logits(a), pos0 + 1 + a, sampler.sample)
        if a < len(drafts) and drafts[a] == t:
            a += 1
            continue
        return a, t


def _constrained_rejection(
    rows: Rows, drafts: Sequence[int], sampler: Sampler, pos0: int, draft_q: Sequence[np.ndarray], c: Constraint
) -> tuple[int, int]:
    """Rejection sampling against the masked target distribution (one-hot where the
    grammar forces a token)."""
    for a, d in enumerate(drafts):
        pos = pos0 + 1 + a
        p = c.distribution(rows.logits(a), sampler.dense)
        q = draft_q[a]
        if q[d] > 0 and sampler.uniform(pos, ACCEPT) * q[d] < p[d]:
            c.take(d)
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        t = sampler.sample_dense(residual / total if total > 0 else p, pos, RESIDUAL)
        c.take(t)
        return a, t
    k = len(drafts)
    return k, c.choose(rows.logits(k), pos0 + 1 + k, sampler.sample)
