"""Child process of test_slots' exact-mode test (exact mode switches process-wide
kernels): the hybrid fixture quantized to Q8_0, four sequences decoded alone and then
together with MTP in exact mode; prints one JSON line: whether each sequence's tokens are
the same, and the largest logit difference between a batched step's rows and the rows
alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from engine.runtime.llama import exact

exact.request()

from engine.runtime.decode.loop import generate  # noqa: E402
from engine.runtime.decode.params import DecodeParams  # noqa: E402
from engine.runtime.decode.policy.base import FixedDepth  # noqa: E402
from engine.runtime.llama.batch import LOGITS_ALL  # noqa: E402
from engine.runtime.llama.quantize import quantize  # noqa: E402
from engine.runtime.load.loader import LoadSpec, MtpSource, load  # noqa: E402

PROMPTS = [
    "Hello there, how are you today?",
    "The quick brown fox jumps over",
    "Once upon a time in a land far away",
    "Numbers: one two three four five",
]


def main(src: str, out: str) -> None:
    q = Path(out) / "slots.Q8_0.gguf"
    quantize(src, q, "Q8_0")
    params = DecodeParams(max_tokens=40, ignore_eog=True, depth=FixedDepth(3))
    spec = LoadSpec(q, mtp=MtpSource.INTEGRATED, n_ctx=256, probe=False, fit="off", exact=True)
    solo = load(spec)
    want, rows_alone = [], []
    for p in PROMPTS:
        solo.session.reset()
        toks = solo.model.prompt_tokens(p)
        want.append(generate(solo.session, toks, params).tokens)
        solo.session.reset()
        solo.session.decode_target(toks[:8], logits=LOGITS_ALL, hidden=True)
        rows_alone.append(np.array([solo.session.target.logits(i) for i in range(8)]))
    identity = solo.info.identity
    solo.close()

    lm = load(
        LoadSpec(q, mtp=MtpSource.INTEGRATED, n_ctx=256, probe=False, fit="off", exact=True, parallel=4, logit_rows=8)
    )
    got: list = [None] * 4
    rows: list = [None] * 4

    slots = [lm.slots.acquire(i) for i in range(4)]

    def run(i: int) -> None:  # on this thread, one of the batcher's sequences
        slot = slots[i]
        try:
            s = slot.session
            toks = lm.model.prompt_tokens(PROMPTS[i])
            s.decode_target(toks[:8], logits=LOGITS_ALL, hidden=True)  # four sequences' rows in one step
            rows[i] = np.array([s.target.logits(k) for k in range(8)])
            s.reset()
            got[i] = generate(s, toks, params).tokens
        finally:
            lm.slots.release(slot)

    for i in range(4):
        lm.slots.batcher.start(lambda i=i: run(i))
    while lm.slots.batcher.active:
        lm.slots.batcher.step_once(0.005)
    lm.close()
    diff = max(float(np.abs(a - b).max()) for a, b in zip(rows, rows_alone))
    print(
        json.dumps({"identity": identity, "same_tokens": [g == w for g, w in zip(got, want)], "max_logit_diff": diff})
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
