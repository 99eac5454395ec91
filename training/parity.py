"""Does llama.cpp run the exported GGUF as PyTorch runs the model? Tokenization, trunk
logits, and the MTP acceptance of a real speculative run — all through the app's own
runtime (``engine.runtime``), as the app will run the file."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from training.model import Qwen35


@dataclass(frozen=True)
class ParityReport:
    tokens_equal: bool
    n_tokens: int
    max_abs_logit_diff: float
    logit_scale: float
    argmax_equal: bool
    generated: int
    greedy_equal: bool  # the engine's greedy tokens are the model's greedy tokens
    drafted: int
    accepted: int
    expected_drafted: int  # from the PyTorch model, simulating the depth-1 rounds
    expected_accepted: int

    @property
    def ok(self) -> bool:
        return (
            self.tokens_equal
            and self.argmax_equal
            and self.greedy_equal
            and self.max_abs_logit_diff <= 1e-3 * max(1.0, self.logit_scale)
            and (self.drafted, self.accepted) == (self.expected_drafted, self.expected_accepted)
        )

    def to_json(self) -> dict:
        return dict(asdict(self), ok=self.ok)


def simulate_depth1(agree: np.ndarray, first: int, n_generate: int) -> tuple[int, int]:
    """(drafted, accepted) of greedy depth-1 speculation, as ``engine.runtime.decode.loop`` runs
    it, given ``agree[t]``: whether the head's draft from (h[t], x[t+1]) equals x[t+2].
    ``first`` is the position of the first generated token."""
    drafted = accepted = 0
    c = 1
    while c < n_generate:
        pos0 = first + c - 1
        if n_generate - c - 1 >= 1:
            drafted += 1
            if agree[pos0 - 1]:
                accepted += 1
                c += 2
                continue
        c += 1
    return drafted, accepted


def check(model: Qwen35, tokenizer, gguf: Path, text: str, *, generate: int = 64) -> ParityReport:
    """Run ``gguf`` through the app's own runtime (tokenizer, one batch of logits, a depth-1
    speculative generation) and compare each with ``model``."""
    from engine.runtime.llama.batch import LOGITS_ALL
    from engine.runtime.decode.loop import DecodeParams, generate as decode
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.load.loader import LoadSpec, MtpSource, load

    ids = tokenizer.encode(text).ids
    lm = load(
        LoadSpec(
            gguf,
            mtp=MtpSource.INTEGRATED,
            n_ctx=max(512, len(ids) + generate + 16),
            max_draft_depth=1,
            n_threads=1,
            probe=False,
            logit_rows=len(ids),
        )
    )
    try:
        theirs = lm.model.tokenize(text)
        s = lm.session
        s.reset()
        s.decode_target(list(ids), logits=LOGITS_ALL, hidden=False)
        ref = np.stack([s.target.logits(i) for i in range(len(ids))])
        s.reset()
        g = decode(s, list(ids), DecodeParams(max_tokens=generate, depth=FixedDepth(1), ignore_eog=True))
    finally:
        lm.close()
    model.eval()
    with torch.no_grad():
        ours = model.output(model.trunk(torch.tensor([ids])))[0].numpy()
    seq = list(ids) + list(g.tokens)
    with torch.no_grad():
        x = torch.tensor([seq])
        h = model.trunk(x)
        greedy = model.output(h)[0].argmax(-1).numpy()
        draft = model.output(model.mtp_hidden(x, h))[0].argmax(-1).numpy()
    n = len(ids)
    greedy_equal = all(int(greedy[t - 1]) == seq[t] for t in range(n, len(seq)))
    agree = np.array([int(draft[t]) == seq[t + 2] for t in range(len(seq) - 2)] + [False, False])
    exp_d, exp_a = simulate_depth1(agree, n, len(g.tokens))
    return ParityReport(
        tokens_equal=theirs == ids,
        n_tokens=len(ids),
        max_abs_logit_diff=float(np.abs(ref - ours).max()),
        logit_scale=float(np.abs(ref).max()),
        argmax_equal=bool((ref.argmax(-1) == ours.argmax(-1)).all()),
        generated=len(g.tokens),
        greedy_equal=greedy_equal,
        drafted=g.stats.drafted,
        accepted=g.stats.accepted,
        expected_drafted=exp_d,
        expected_accepted=exp_a,
    )
