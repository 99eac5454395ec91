"""Child process of test_mtp_families' exact-mode test: exact mode switches process-wide
kernels, so it runs here. Quantizes each family fixture to Q8_0 (F32 weights go through
llamafile's sgemm, which is not batch-invariant), measures every verify width and each
MTP depth against one-token-at-a-time decoding, and prints one JSON line per family."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.runtime.llama import exact

exact.request()

from engine.errors import MtpStudioError  # noqa: E402
from engine.runtime.llama.quantize import quantize  # noqa: E402
from engine.runtime.load.loader import LoadSpec, MtpSource, load  # noqa: E402
from benchmarks.decoding.batch_identity import measure  # noqa: E402


def main(index: str, out: str) -> None:
    fixtures = json.loads(Path(index).read_text())
    for name, f in fixtures.items():
        q = Path(out) / f"{name}.Q8_0.gguf"
        quantize(f["target"], q, "Q8_0")
        head = None
        if name in ("deepseek4", "gemma4"):
            head = Path(out) / f"{name}-head.Q8_0.gguf"
            quantize(f["head"], head, "Q8_0")
        try:
            lm = load(
                LoadSpec(
                    q, head=head, mtp=MtpSource.AUTO, n_ctx=256, probe=False, fit="off", max_draft_depth=3, exact=True
                )
            )
        except MtpStudioError as e:
            print(json.dumps({"family": name, "refused": str(e)}), flush=True)
            continue
        try:
            prompt = lm.model.prompt_tokens("Hello! How are you today? Tell me a story about a cat.")
            r = measure(lm, prompt, tokens=24, max_width=4, depths=[1, 2, 3] if lm.source != MtpSource.OFF else [])
            body = dict(
                r.to_json(), family=name, mtp=lm.source.value, identity=lm.info.identity, runs=r.to_json()["mtp"]
            )
        finally:
            lm.close()
        print(json.dumps(body), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
