"""Is a row's result independent of the batch it is computed in? Measured, not assumed.

A speculative verify decodes ``[last, d1..dK]`` in one batch; plain decoding computes
each row alone. llama.cpp's kernels are not batch-invariant on every build, so the two
can differ where the target's top two logits nearly tie. This module measures it on any
model (``mtp-studio bench identity``):

* **replay**: decode N greedy tokens one at a time (the reference), then decode the same
  tokens again in chunks of width w (as verify batches are) and compare every row's
  logits with the reference: max |difference| and argmax flips, with the reference's
  top-2 margin at each flip;
* **mtp**: where the model has MTP, generate with it at each depth and compare with plain
  greedy: identical or not, and the margin at the first divergence;
* **check_within_noise**: the weaker invariant that holds on any build — every emitted
  token's logit, recomputed one token at a time along the output, is within a noise
  bound of that row's maximum (a token speculation got wrong by more fails it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from engine.errors import InvalidSettingError

from engine.runtime.llama.batch import LOGITS_ALL
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
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


@dataclass
class MtpReport:
    depth: int
    tokens: int
    identical: bool
    first_divergence: int | None = None
    margin_at_divergence: float | None = None


@dataclass
class IdentityReport:
    model: str
    tokens: int
    widths: list[WidthReport]
    mtp: list[MtpReport]
    #: the prompt's last row when the prompt is decoded in one call vs in two (a reused
    #: prefix): max |logit difference|
    prefill_split_diff: float = 0.0

    @property
    def noise(self) -> float:
        """Largest logit difference seen between a row alone and in a batch."""
        return max((w.max_abs_diff for w in self.widths), default=0.0)

    @property
    def exact(self) -> bool:
        return self.noise == 0.0 and self.prefill_split_diff == 0.0 and all(m.identical for m in self.mtp)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "tokens": self.tokens,
            "noise": self.noise,
            "prefill_split_diff": self.prefill_split_diff,
            "exact": self.exact,
            "widths": [
                {k: v for k, v in asdict(w).items() if k != "batch_tokens"} | {"flips_per_1000": w.flips_per_1000}
                for w in self.widths
            ],
            "mtp": [asdict(m) for m in self.mtp],
        }


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


def mtp_runs(
    lm: LoadedModel, prompt: list[int], tokens: list[int], ref: np.ndarray, depths: list[int]
) -> list[MtpReport]:
    out = []
    for k in depths:
        lm.session.reset()
        g = generate(lm.session, prompt, DecodeParams(max_tokens=len(tokens), depth=FixedDepth(k), ignore_eog=True))
        lm.session.reset()
        first = next((i for i, (a, b) in enumerate(zip(g.tokens, tokens)) if a != b), None)
        if first is None and len(g.tokens) != len(tokens):
            first = min(len(g.tokens), len(tokens))
        margin = top2_margin(ref[first]) if first is not None and first < len(ref) else None
        out.append(MtpReport(k, len(g.tokens), first is None, first, margin))
    return out


def measure(
    lm: LoadedModel, prompt: list[int], *, tokens: int = 128, max_width: int = 8, depths: list[int] | None = None
) -> IdentityReport:
    rows = lm.session.target.n_outputs
    if max_width > rows:
        raise InvalidSettingError(
            f"This model was loaded for batches of at most {rows} logit rows; use --max-width {rows} or less "
            f"(or load it with a deeper --max-depth: rows = depth + 1)."
        )
    seq, ref = reference(lm, prompt, tokens)
    widths = [replay(lm, prompt, seq, ref, w) for w in range(2, max_width + 1)]
    mtp = []
    if lm.session.draft is not None:
        mtp = mtp_runs(lm, prompt, seq, ref, depths or [1, 2, 3])
    return IdentityReport(lm.name, tokens, widths, mtp, prefill_split(lm, prompt))


def prefill_split(lm: LoadedModel, prompt: list[int]) -> float:
    """Decode ``prompt`` in one call, then as two parts (as a reused prefix is); the max
    |difference| of the last row's logits."""
    s = lm.session
    rows = []
    for cut in (0, len(prompt) // 2):
        s.decode_tokens(prompt[:cut], want_logits=False, fresh=True)
        s.decode_tokens(prompt[cut:], want_logits=True)
        rows.append(s.target.logits(-1).copy())
    s.reset()
    return float(np.max(np.abs(rows[0] - rows[1])))


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
