"""Is a row's result independent of the batch it is computed in? The checks the self-test
and the A/B bench rely on.

A speculative verify decodes ``[last, d1..dK]`` in one batch; plain decoding computes
each row alone. llama.cpp's kernels are not batch-invariant on every build, so the two
can differ where the target's top two logits nearly tie:

* **reference** and **replay**: decode N greedy tokens one at a time (the reference), then
  decode the same tokens again in chunks of width w (as verify batches are) and compare
  every row's logits with the reference: max |difference| (the noise) and argmax flips,
  with the reference's top-2 margin at each flip;
* **check_within_noise**: the weaker invariant that holds on any build — every emitted
  token's logit, recomputed one token at a time along the output, is within a noise
  bound of that row's maximum (a token speculation got wrong by more fails it);
* **top2_margin**: how near a tie a row is (the A/B bench reports it where an arm differs).

``mtp-studio --self-test`` uses the first two. The study of a model's noise at every width,
MTP against plain and a split prefill (``mtp-studio bench identity``) is the benchmarks
harness's (benchmarks/decoding/batch_identity.py), built on these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.runtime.llama.batch import LOGITS_ALL
from engine.runtime.load.loader import LoadedModel


@dataclass
class WidthReport:
    width: int
    rows: int
    max_abs_diff: float
    flips: int
    #: the one-token-at-a-time top-2 margin at each flip
    flip_margins: list[float] = field(default_factory=list)
    #: the argmax of each batch row: what a verify batch of this width would emit
    batch_tokens: list[int] = field(default_factory=list, repr=False)

    @property
    def flips_per_1000(self) -> float:
        return 1000.0 * self.flips / self.rows if self.rows else 0.0


def top2_margin(row: np.ndarray) -> float:
    a, b = np.partition(row, -2)[-2:]
    return float(max(a, b) - min(a, b))


def reference(lm: LoadedModel, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """Greedy tokens decoded one at a time after ``prompt``, and the logits row that
    chose each (row i chose token i)."""
    s = lm.session
    s.decode_tokens(prompt, want_logits=True, fresh=True)
    rows = np.empty((n, lm.model.n_vocab), np.float32)
    tokens: list[int] = []
    for i in range(n):
        rows[i] = s.target.logits(-1)
        tokens.append(int(np.argmax(rows[i])))
        if i + 1 < n:
            s.decode_target([tokens[-1]], logits="last", hidden=False)
    s.reset()
    return tokens, rows


def replay(lm: LoadedModel, prompt: list[int], tokens: list[int], ref: np.ndarray, width: int) -> WidthReport:
    """Decode ``prompt[-1:] + tokens`` again in batches of ``width`` rows and compare each
    row with the one-at-a-time reference."""
    s = lm.session
    s.decode_tokens(prompt[:-1], want_logits=False, fresh=True)
    seq = [prompt[-1], *tokens[:-1]]  # row j of the replay predicts tokens[j]
    diff, flips, margins, emitted = 0.0, 0, [], []
    for start in range(0, len(seq), width):
        chunk = seq[start : start + width]
        s.decode_target(chunk, logits=LOGITS_ALL, hidden=False)
        for j in range(len(chunk)):
            row = s.target.logits(j)
            k = start + j
            diff = max(diff, float(np.max(np.abs(row - ref[k]))))
            emitted.append(int(np.argmax(row)))
            if emitted[-1] != tokens[k]:
                flips += 1
                margins.append(top2_margin(ref[k]))
    s.reset()
    return WidthReport(width, len(seq), diff, flips, margins, emitted)


def check_within_noise(lm: LoadedModel, prompt: list[int], emitted: list[int], bound: float) -> list[tuple[int, float]]:
    """Recompute each emitted token's row one token at a time along ``emitted``; return
    the positions (and shortfalls) where its logit is more than ``bound`` below the row's
    maximum. Empty: every token is the target's argmax up to the noise bound."""
    s = lm.session
    s.decode_tokens(prompt, want_logits=True, fresh=True)
    bad = []
    for i, tok in enumerate(emitted):
        row = s.target.logits(-1)
        short = float(np.max(row) - row[tok])
        if short > bound:
            bad.append((i, short))
        if i + 1 < len(emitted):
            s.decode_target([tok], logits="last", hidden=False)
    s.reset()
    return bad
