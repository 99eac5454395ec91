"""Child process of test_suffix's exact-mode test (exact mode switches process-wide
kernels): the full-acceptance fixture as Q8_0, a prompt whose answer copies a stretch of
it; prints one JSON line: whether suffix drafts gave plain decoding's tokens, and how many
were drafted and accepted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.runtime.llama import exact

exact.request()

from engine.runtime.decode.loop import generate  # noqa: E402
from engine.runtime.decode.params import DecodeParams  # noqa: E402
from engine.runtime.decode.policy.base import FixedDepth  # noqa: E402
from engine.runtime.llama.quantize import quantize  # noqa: E402
from engine.runtime.load.loader import LoadSpec, MtpSource, load  # noqa: E402


def main(src: str, out: str) -> None:
    q = Path(out) / "full.Q8_0.gguf"
    quantize(src, q, "Q8_0")
    lm = load(LoadSpec(q, mtp=MtpSource.INTEGRATED, n_ctx=1024, probe=False, fit="off", exact=True))
    try:
        start = lm.model.prompt_tokens("Once upon a time there was a small village")
        earlier = generate(lm.session, start, DecodeParams(max_tokens=120, ignore_eog=True)).tokens
        prompt = start + earlier + start[1:]

        def run(**kw):
            lm.session.reset()
            return generate(lm.session, prompt, DecodeParams(max_tokens=100, ignore_eog=True, **kw))

        plain = run().tokens
        both = run(depth=FixedDepth(2), suffix_drafts=True)
        print(
            json.dumps(
                {
                    "identity": lm.info.identity,
                    "same": both.tokens == plain,
                    "suffix_drafted": both.stats.suffix_drafted,
                    "suffix_accepted": both.stats.suffix_accepted,
                }
            )
        )
    finally:
        lm.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
