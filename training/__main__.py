"""``python -m training``: retrain the bundled demo model (needs the ``train`` extra).

python -m training all --out build/train-demo      # prepare, train (~1 h), export, parity
python -m training train --out DIR --minutes 30    # stop after 30 min; run again to resume
python -m training export --out DIR --gguf resources/demo.gguf
python -m training parity --out DIR --gguf F.gguf
python -m training ship --out DIR --gguf resources/demo.gguf --dtype q8_0
                                        # parity-checked export + resources/demo.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    from training import pipeline as pl

    p = argparse.ArgumentParser(
        prog="python -m training", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("step", choices=["prepare", "train", "export", "parity", "all", "ship"])
    p.add_argument("--out", type=Path, required=True, help="working folder (checkpoints, tokenizer, logs)")
    p.add_argument("--preset", choices=sorted(pl.PRESETS), default="demo")
    p.add_argument("--minutes", type=float, default=None, help="pause training after this long (resume later)")
    p.add_argument("--gguf", type=Path, default=None, help="GGUF to write / check (default: OUT/model.gguf)")
    p.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f16")
    a = p.parse_args(argv)
    preset = pl.PRESETS[a.preset]
    gguf = a.gguf or a.out / "model.gguf"
    if a.step in ("prepare", "all"):
        pl.prepare(a.out, preset)
    if a.step in ("train", "all"):
        pl.run_training(a.out, preset, minutes=a.minutes)
    if a.step in ("export", "all"):
        print(f"wrote {pl.export_gguf(a.out, gguf, dtype=a.dtype)}")
    if a.step == "ship":
        m = pl.ship(a.out, gguf, dtype=a.dtype)
        print(json.dumps({k: m[k] for k in ("file", "sha256", "bytes", "held_out")}))
        return 0
    if a.step in ("parity", "all"):
        r = pl.parity(a.out, gguf)
        print(json.dumps(r.to_json()))
        return 0 if r.ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
