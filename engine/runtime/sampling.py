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
    """Draws tokens from logits; the same seed gives the same sequence.

    Never sorts the whole vocabulary (262,144 entries on Gemma): top-k is a partition,
    top-p grows a partial sort of the most likely tokens until it covers ``top_p`` of
    the mass, and plain temperature sampling is one inverse-CDF pass. One uniform draw
    per sampled token."""

    #: first candidate count tried for top-p (grown 4x until it covers the mass)
    NUCLEUS_START = 64

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def sample(self, logits: np.ndarray) -> int:
        if self.params.greedy:
            return int(np.argmax(logits))
        idx, weights = self._weights(logits)
        cum = np.cumsum(weights)
        i = int(np.searchsorted(cum, self.rng.random() * cum[-1], side="right"))
        return int(idx[min(i, len(cum) - 1)]) if idx is not None else min(i, len(cum) - 1)

    def distribution(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The candidates (token ids) and their probabilities (summing to 1) after
        temperature, top-k and top-p, as plain sampling draws from them."""
        idx, w = self._weights(logits)
        if idx is None:
            idx = np.arange(w.size)
        return idx, w / w.sum()

    def _weights(self, logits: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """Candidate ids (None: the whole vocabulary, in order) and unnormalised weights."""
        p = self.params
        x = np.asarray(logits)
        n = x.size
        cand = None
        if 0 < p.top_k < n:
            cand = np.argpartition(-x, p.top_k - 1)[: p.top_k]
            x = x[cand]
        z = x.astype(np.float64)
        z -= z.max()
        z *= 1.0 / p.temperature
        w = np.exp(z, out=z)
        if p.top_p >= 1.0:
            return cand, w
        total = w.sum()
        if cand is None:
            cand = np.arange(n)
        m = min(self.NUCLEUS_START, w.size)
        while True:
            top = np.argpartition(-w, m - 1)[:m] if m < w.size else np.arange(w.size)
            top = top[np.argsort(-w[top], kind="stable")]
            cum = np.cumsum(w[top]) / total
            if cum[-1] >= p.top_p or m >= w.size:
                keep = min(int(np.searchsorted(cum, p.top_p)) + 1, m)
                return cand[top[:keep]], w[top[:keep]]
            m = min(m * 4, w.size)
