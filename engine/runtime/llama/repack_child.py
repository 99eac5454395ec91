"""The child side of :mod:`engine.runtime.llama.repack`: do llama.cpp's repacked CPU kernels
run here? Loads the bundled demo model (Q8_0) and its Q4_0 and Q4_K_M quantizations, on the
CPU alone and with repacking on (``--no-repack``: off, the control run), and decodes a batch
of rows and then one row with each — the two shapes whose kernels differ. Prints one JSON
line per stage, so a crash leaves the stage it died in; ``{"ok": true}`` at the end.

``python -m engine.runtime.llama.repack_child [--no-repack]``
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

#: quantizations made from the demo: the types every repacking CPU has kernels for
QUANTS = ("Q4_0", "Q4_K_M")
BATCH_ROWS = 32


def _say(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _decode(path: Path, repack: bool) -> None:
    from engine.runtime.llama.batch import LOGITS_LAST, Batch
    from engine.runtime.llama.context import Context
    from engine.runtime.llama.model import Model

    model = Model.load(path, load_mtp=True, n_gpu_layers=0, use_extra_bufts=repack)
    try:
        ctx = Context(model, n_ctx=128, n_batch=BATCH_ROWS, n_outputs=1)
        batch = Batch(BATCH_ROWS)
        try:
            tokens = [(7 * i + 3) % model.n_vocab for i in range(BATCH_ROWS)]
            batch.set(tokens, 0, LOGITS_LAST)
            ctx.decode(batch)
            batch.set([ctx.argmax(0)], BATCH_ROWS, LOGITS_LAST)
            ctx.decode(batch)
            ctx.argmax(0)
        finally:
            batch.close()
            ctx.close()
    finally:
        model.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.runtime.llama.repack_child")
    ap.add_argument("--no-repack", action="store_true", help="the control run: repacking off")
    ap.add_argument("--work", help="an empty folder for the quantized files (the parent's: a crash leaves nothing)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr, format="%(message)s")
    repack = not a.no_repack

    from engine.runtime.llama.quantize import quantize
    from engine.synth.demo import demo_model_path

    demo = demo_model_path()
    with tempfile.TemporaryDirectory(prefix="mtp-studio-repack-", dir=a.work) as tmp:
        files = [("Q8_0", demo)]
        for quant in QUANTS:
            _say(stage=f"quantizing the demo model to {quant}")
            files.append((quant, quantize(demo, Path(tmp) / f"demo-{quant}.gguf", quant, threads=1, requantize=True)))
        for quant, path in files:
            _say(stage=f"decoding a {quant} model")
            _decode(path, repack)
    _say(stage="done", ok=True, repack=repack)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
