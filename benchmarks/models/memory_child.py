"""The child side of :mod:`benchmarks.models.memory`: load a model as the app does,
prefill one full batch and decode a few tokens (so every buffer is touched), and print
one JSON line: the process's resident memory before the load and its peak after, and
the buffer sizes llama.cpp logged.

``python -m benchmarks.models.memory_child PATH --ctx N [--head H] [--mtp SOURCE]``
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from benchmarks.models.memlog import BufferLog, current_rss, peak_rss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.models.memory_child")
    ap.add_argument("path")
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--head")
    ap.add_argument("--mtp", default="auto")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--threads", type=int)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr, format="%(message)s")

    import numpy as np

    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.llama.lib import llama
    from engine.runtime.load.loader import LoadSpec, MtpSource, load

    llama()  # the library and its log hook, before the baseline is read
    buffers = BufferLog.attach()
    base = current_rss()
    lm = load(
        LoadSpec(
            a.path,
            head=a.head,
            mtp=MtpSource(a.mtp),
            n_ctx=a.ctx,
            max_draft_depth=a.depth,
            n_threads=a.threads,
            probe=False,
            fit="off",
        )
    )
    s = lm.session
    n = min(s.target.n_batch, s.target.n_ctx - a.depth - 16)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(0, lm.model.n_vocab, size=n)]
    s.decode_tokens(tokens, want_logits=True, fresh=True)
    depth = FixedDepth(max(1, min(a.depth, 2))) if s.draft is not None else None
    generate(s, tokens[:8], DecodeParams(max_tokens=8, depth=depth, ignore_eog=True))
    out = {
        "n_ctx": s.target.n_ctx,
        "mtp": lm.source.value,
        "rss_before": base,
        "peak_rss": peak_rss(),
        "rss_after": current_rss(),
        "buffers": buffers.sizes(),
    }
    lm.close()
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
