"""Child process of test_images' exact-mode test (exact mode switches process-wide
kernels): the demo with a projector, a prompt with a picture decoded greedily with MTP at
depth 3 and without; prints one JSON line: whether each picture's tokens are the same,
the drafts made, and the load's identity claim."""

from __future__ import annotations

import json
import sys

from engine.runtime.llama import exact

exact.request()

from engine.runtime.decode.loop import generate  # noqa: E402
from engine.runtime.decode.params import DecodeParams  # noqa: E402
from engine.runtime.decode.policy.base import FixedDepth  # noqa: E402
from engine.runtime.load.loader import LoadSpec, MtpSource, load  # noqa: E402
from engine.runtime.media import Media  # noqa: E402
from engine.runtime.media.projector import MARKER  # noqa: E402
from tests.synth.images import png_bytes  # noqa: E402


def main(model: str, mmproj: str) -> None:
    lm = load(LoadSpec(model, mtp=MtpSource.INTEGRATED, n_ctx=512, probe=False, fit="off", exact=True, mmproj=mmproj))
    assert lm.projector is not None
    same, drafted = [], 0
    for seed in (1, 2):
        text = f"<|im_start|>user\nLook: {MARKER}\nWhat is it?<|im_end|>\n<|im_start|>assistant\n"
        media = lm.projector.prompt(text, [Media("image", png_bytes(96, 64, seed), "image/png", 96, 64)])
        prompt = lm.model.with_bos(media.tokens)
        outs = []
        for depth in (FixedDepth(3), None):
            lm.session.reset()
            params = DecodeParams(max_tokens=40, ignore_eog=True, depth=depth, media=media.chunks)
            d = generate(lm.session, prompt, params)
            drafted += d.stats.drafted
            outs.append(d.tokens)
        same.append(outs[0] == outs[1])
    print(json.dumps({"same": same, "drafted": drafted, "identity": lm.info.identity}))
    lm.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
