"""The table (docs/real-models.md) of real and quantized models: architecture, quantization, plain
decode tokens/s (this engine vs llama-cpp-python's ``Llama`` on the same file, threads and
context) and MTP status, with the A/B speed-up of auto depth where the model has MTP.
Prints figures; not a test.

    python -m benchmarks.decoding.realmodels [--runs 5] [--tokens 128] [--json]

Models: Gemma 3 270M Q4_K_M (real, fetched into the test cache), the partial-acceptance
test fixture at Q8_0 / Q4_0 / Q4_K_M, and a 200 MB generated qwen35 benchmark model at
80% draft acceptance quantized to Q8_0 and Q4_K_M (llama.cpp's quantizer).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _models(work: Path) -> list[tuple[str, Path]]:
    from engine.runtime.llama.quantize import quantize
    from engine.synth.benchmodel import make_bench_model
    from tests.models import build_fixture
    from tests.realmodels import fetch

    out = [("real", fetch())]
    fx = build_fixture("partial", work / "fixtures")
    for q in ("Q8_0", "Q4_0", "Q4_K_M"):
        out.append(("test fixture", quantize(fx.path, work / f"fixture-partial-{q}.gguf", q)))
    big = make_bench_model(200, 0.8, work / "bench-a0.8-F16.gguf").integrated
    for q in ("Q8_0", "Q4_K_M"):
        out.append(("benchmark model", quantize(big, work / f"bench-a0.8-{q}.gguf", q)))
    return out


def _mtp_ab(path: Path, runs: int, tokens: int) -> dict:
    """The A/B benchmark in its own process (``mtp-studio bench --json``): a process that
    has also run llama-cpp-python's ``Llama`` measured every arm 2-4x slower here."""
    cmd = [
        sys.executable,
        "-m",
        "app.launcher",
        "bench",
        "--model",
        str(path),
        "--depths",
        "0,3,auto",
        "--runs",
        str(runs),
        "--max-tokens",
        str(tokens),
        "--json",
    ]
    body = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    arms = {a["depth"]: a for a in body["arms"]}
    return {
        "plain_tps": arms["0"]["tokens_per_second_median"],
        "d3_tps": arms["3"]["tokens_per_second_median"],
        "auto_tps": arms["auto"]["tokens_per_second_median"],
        "auto_speedup": arms["auto"]["speedup"],
        "acceptance_d3": arms["3"]["acceptance"],
        "identical": body["identical"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.realmodels")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from engine.gguf.inspect import inspect_path
    from benchmarks.decoding.versus_llama_cpp_python import run_versus

    rows = []
    with tempfile.TemporaryDirectory(prefix="mtp-realmodels-") as tmp:
        for kind, path in _models(Path(tmp)):
            s = inspect_path(path)
            v = run_versus(path, tokens=a.tokens, runs=a.runs)
            row = {
                "model": path.name,
                "kind": kind,
                "architecture": s["architecture"],
                "quantization": s["quantization"],
                "size_mb": s["size_bytes"] / 1e6,
                "vocab": s["tokenizer"]["vocab_size"],
                **v.to_json(),
                "mtp": s["mtp"]["kind"],
                "mtp_ab": _mtp_ab(path, 3, a.tokens) if s["nextn_layers"] else None,
            }
            rows.append(row)
            if not a.json:
                ab = row["mtp_ab"]
                mtp = (
                    "none (no NextN layers)"
                    if ab is None
                    else (
                        f"integrated; A/B: plain {ab['plain_tps']:.1f}, depth 3 {ab['d3_tps']:.1f}, auto "
                        f"{ab['auto_tps']:.1f} "
                        f"tok/s ({ab['auto_speedup']:.2f}x), depth-3 acceptance {ab['acceptance_d3']:.2f}, "
                        f"identical: {'yes' if ab['identical'] else 'NO'}"
                    )
                )
                print(
                    f"| {row['model']} ({kind}) | {row['architecture']} | {row['quantization']} | "
                    f"{row['size_mb']:.1f} MB | "
                    f"{row['ours_tokens_per_second']:.1f} | {row['llama_cpp_python_tokens_per_second']:.1f} | "
                    f"{row['ratio']:.3f} | {'yes' if row['same_tokens'] else 'NO'} | {mtp} |",
                    flush=True,
                )
    if a.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
