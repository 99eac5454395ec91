"""Ordinary (non-greedy) sampling: temperature, top-k, top-p, seeded.

Used when ``temperature > 0``. Speculation is off then: accepting a draft by token
equality is only valid for greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Sampler:
    """Draws tokens from logits; the same seed gives the same sequence."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def sample(self, logits: np.ndarray) -> int:
        p = self.params
        if p.greedy:
            return int(np.argmax(logits))
        x = logits.astype(np.float64) / p.temperature
        idx = np.argsort(-x, kind="stable")
        if p.top_k > 0:
            idx = idx[: p.top_k]
        x = x[idx]
        probs = np.exp(x - x[0])
        probs /= probs.sum()
        if p.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1
            idx, probs = idx[:keep], probs[:keep] / probs[:keep].sum()
        return int(idx[self.rng.choice(len(idx), p=probs)])
