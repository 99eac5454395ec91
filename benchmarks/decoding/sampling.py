"""The sampling table of docs/mtp.md: speculation while sampling at temperature 0.7, both modes,
on 200 MB generated benchmark models at several draft acceptances (``bench make-model``).
Each run is ``mtp-studio bench --temperature 0.7 [--sampled-draft] --json`` in its own
process. Prints figures; not a test.

    python -m benchmarks.decoding.sampling [--acceptances 0.5,0.8,1.0] [--runs 3] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _bench(model: Path, runs: int, tokens: int, depths: str, temperature: float, sampled_draft: bool) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "app.launcher",
        "bench",
        "--model",
        str(model),
        "--depths",
        depths,
        "--runs",
        str(runs),
        "--max-tokens",
        str(tokens),
        "--temperature",
        str(temperature),
        "--json",
    ]
    if sampled_draft:
        cmd.append("--sampled-draft")
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.sampling")
    ap.add_argument("--acceptances", default="0.5,0.8,1.0")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--depths", default="0,1,2,3,auto")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from engine.synth.benchmodel import make_bench_model

    rows = []
    with tempfile.TemporaryDirectory(prefix="mtp-sampling-") as tmp:
        for acc in (float(x) for x in a.acceptances.split(",")):
            model = make_bench_model(200, acc, Path(tmp) / f"bench-a{acc}.gguf").integrated
            for sampled_draft in (False, True):
                body = _bench(model, a.runs, a.max_tokens, a.depths, a.temperature, sampled_draft)
                rows.append({"acceptance_built": acc, "sampled_draft": sampled_draft, **body})
                if a.json:
                    continue
                arms = {x["depth"]: x for x in body["arms"]}
                cells = []
                for d in a.depths.split(","):
                    x = arms[d]
                    cells.append(
                        f"{x['tokens_per_second_median']:.1f}"
                        if d == "0"
                        else f"{x['tokens_per_second_median']:.1f} ({x['speedup']:.2f}x, acc {x['acceptance']:.2f})"
                    )
                pos = ", ".join(f"{p:.2f}" for p in arms["3"]["acceptance_by_position"]) if "3" in arms else ""
                same = "n/a" if body["sampled_draft"] else ("yes" if body["identical"] else "NO")
                mode = "sampled drafts" if sampled_draft else "argmax drafts"
                print(f"| {acc} | {mode} | " + " | ".join(cells) + f" | {pos} | {same} |", flush=True)
    if a.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
