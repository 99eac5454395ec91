"""Run by tests/engine/runtime/test_repack.py in a child process that plays a CPU whose
repacked kernels crash (``MTP_STUDIO_SIMULATE_REPACK_CRASH=1``: any load with repacking on
ends the process with SIGILL, as the AMX kernels do). Loads a quantized model every way
the app does — without the load probe, with it, and on the engine thread — decodes with MTP,
and prints one JSON line of what it saw. Reaching the end at all is the first check.

``python -m tests.engine.runtime.repack_crash_child MODEL.gguf``
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    from engine.runtime import jobs as J
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.engine import Engine
    from engine.runtime.llama import repack
    from engine.runtime.load.loader import LoadSpec, MtpSource, load
    from benchmarks.models.memlog import BufferLog

    out: dict = {"verdict": repack.verdict().to_json()}
    buffers = BufferLog.attach()
    lm = load(LoadSpec(path, mtp=MtpSource.INTEGRATED, n_ctx=256, probe=False, fit="off"))
    try:
        out["unprobed"] = {"extra_bufts": lm.info.extra_bufts, "repack_notice": lm.info.repack_notice}
        prompt = lm.model.prompt_tokens("def add(a, b):")
        g = generate(lm.session, prompt, DecodeParams(max_tokens=8, depth=FixedDepth(2), ignore_eog=True))
        out["unprobed"]["tokens"], out["unprobed"]["drafted"] = len(g.tokens), g.stats.drafted
    finally:
        lm.close()
    lm = load(LoadSpec(path, mtp=MtpSource.INTEGRATED, n_ctx=256))  # the load probe's child, then here
    try:
        out["probed"] = {"extra_bufts": lm.info.extra_bufts, "fallbacks": lm.info.fallbacks}
    finally:
        lm.close()
    buffers.detach()
    out["weight_buffers"] = sorted({buft for part, buft, _ in buffers.lines if part == "weights"})
    with Engine() as eng:
        info = eng.submit(J.LoadModel(LoadSpec(path, n_ctx=256, parallel=2))).result(120)
        out["engine"] = {
            "extra_bufts": info.extra_bufts,
            "tokens": len(eng.submit(J.Generate(prompt="Hi", max_tokens=6)).result(60).tokens),
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
