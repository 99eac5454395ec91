"""Sampling (temperature, top-k, top-p) with a counter-based random stream.

Every random number is a pure function of (seed, absolute position, stream): the token
at position p is drawn with ``uniform(seed, p, DRAW)`` whether it is sampled after a
one-token decode or from a row of a speculative verify batch. So speculation that samples
the target at each verified position and keeps a draft only while the sampled token
equals it (:mod:`engine.runtime.decode.loop`, argmax drafts) emits exactly the tokens plain
sampling with the same seed emits. Sampled drafts use other streams (``DRAFT``,
``ACCEPT``, ``RESIDUAL``) and are exact in distribution only.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

_MASK = (1 << 64) - 1
#: streams of the counter-based generator
DRAW, DRAFT, ACCEPT, RESIDUAL = 0, 1, 2, 3


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a bijective 64-bit hash with full avalanche."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, position: int, stream: int = DRAW) -> float:
    """A uniform number in [0, 1) determined by (seed, position, stream) alone."""
    z = _mix(_mix(_mix(seed & _MASK) ^ position) ^ (stream * 0xD1B54A32D192ED03 & _MASK))
    return (z >> 11) * (1.0 / (1 << 53))


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
        #: a request without a seed gets a fresh one (reported, so it can be replayed)
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)

    def uniform(self, position: int, stream: int = DRAW) -> float:
        return uniform(self.seed, position, stream)

    def sample(self, logits: np.ndarray, position: int, stream: int = DRAW) -> int:
        """The token at absolute ``position`` (greedy: the argmax)."""
        if self.params.greedy:
            return int(logits.argmax())  # the method: np.argmax's wrapper costs as much again
        idx, weights = self._weights(logits)
        cum = np.cumsum(weights)
        i = int(np.searchsorted(cum, self.uniform(position, stream) * cum[-1], side="right"))
        return int(idx[min(i, len(cum) - 1)]) if idx is not None else min(i, len(cum) - 1)

    def dense(self, logits: np.ndarray) -> np.ndarray:
        """The sampling distribution as a vocabulary-sized vector (for rejection sampling)."""
        idx, w = self._weights(logits)
        out = np.zeros(np.asarray(logits).size, np.float64)
        if idx is None:
            out[:] = w
        else:
            out[idx] = w
        return out / out.sum()

    def sample_dense(self, probs: np.ndarray, position: int, stream: int) -> int:
        cum = np.cumsum(probs)
        i = int(np.searchsorted(cum, self.uniform(position, stream) * cum[-1], side="right"))
        return min(i, probs.size - 1)

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
