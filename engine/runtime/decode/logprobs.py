"""Log-probabilities of emitted tokens, as OpenAI's ``logprobs`` reports them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenLogprob:
    """A token's log-probability under the model's own row (before penalties, the grammar
    mask, temperature and top-k/top-p), and the most likely alternatives there. A token a
    grammar forced into a batch with no row of its own reports 0.0 and no alternatives."""

    token: int
    piece: bytes
    logprob: float
    #: (token, its bytes, log-probability), most likely first
    top: tuple[tuple[int, bytes, float], ...] = ()


def token_logprob(row: np.ndarray, token: int, n_top: int, piece: Callable[[int], bytes]) -> TokenLogprob:
    x = np.asarray(row, dtype=np.float64)
    m = x.max()
    lse = m + np.log(np.exp(x - m).sum())
    top: tuple[tuple[int, bytes, float], ...] = ()
    if n_top > 0:
        idx = np.argpartition(-x, min(n_top, x.size) - 1)[:n_top]
        idx = idx[np.argsort(-x[idx], kind="stable")]
        top = tuple((int(i), piece(int(i)), float(x[i] - lse)) for i in idx)
    return TokenLogprob(token, piece(token), float(x[token] - lse), top)
