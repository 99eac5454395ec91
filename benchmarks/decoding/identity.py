"""The identity table of docs/mtp.md: for each model and configuration, llama.cpp's logit noise
between a row alone and in a batch, argmax flips per 1,000 tokens by verify width
(= draft depth + 1), whether MTP output equals plain greedy output, and what exact mode
costs in prefill and decode speed. Every measurement runs in its own process (exact mode
is chosen per process). Prints figures; not a test.

    python -m benchmarks.decoding.identity [--tokens 128] [--exact-lib DIR]

``--exact-lib`` points at the lib folder of a build made with ``backend build --exact``
(the F16 row needs it: llamafile's sgemm is what makes F16 batches differ).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import child_env

PROMPT = "Once upon a time, in a small village by the sea, there lived"
COST = r"""
import json, statistics, sys
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.load.loader import LoadSpec, MtpSource, load
lm = load(LoadSpec(sys.argv[1], n_ctx=2048, mtp=MtpSource.OFF, exact=sys.argv[2] == "1"))
p = lm.model.prompt_tokens(" ".join(f"Item {i} is on the shelf." for i in range(80)))[:512]
pre, dec = [], []
for r in range(4):
    lm.session.reset()
    g = generate(lm.session, p, DecodeParams(max_tokens=64, ignore_eog=True))
    if r:
        pre.append(len(p) / (g.stats.prompt_ms / 1000))
        dec.append((len(g.tokens) - 1) / (g.stats.generation_ms / 1000))
print(json.dumps({"prefill": statistics.median(pre), "decode": statistics.median(dec)}))
"""


def _run(args: list[str], env: dict) -> dict:
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _env(exact: bool, lib: str | None) -> dict:
    env = child_env()
    env.pop("GGML_CPU_TILED_MM", None)
    if exact:
        env["MTP_STUDIO_EXACT"] = "1"
    if lib:
        env["LLAMA_CPP_LIB_PATH"] = lib
    return env


def row(path: Path, label: str, exact: bool, tokens: int, lib: str | None) -> dict:
    env = _env(exact, lib)
    ident = _run(
        [
            "-m",
            "benchmarks.decoding.batch_identity",
            "--model",
            str(path),
            "--tokens",
            str(tokens),
            "--max-width",
            "8",
            "--depths",
            "1,2,3",
            "--prompt",
            PROMPT,
            *(["--exact"] if exact else []),
            "--json",
        ],
        env,
    )
    cost = _run(["-c", COST, str(path), "1" if exact else "0"], env)
    return {
        "model": label,
        "build": "exact (LLAMAFILE off)" if lib else "default",
        "exact_mode": exact,
        **ident,
        **cost,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.identity")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--exact-lib", help="lib folder of an exact CPU build (for the F16 row)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from engine.runtime.llama.quantize import quantize
    from engine.synth.benchmodel import make_bench_model
    from tests.models import build_fixture
    from tests.realmodels import fetch

    rows = []
    with tempfile.TemporaryDirectory(prefix="mtp-identity-") as tmp:
        work = Path(tmp)
        fx = build_fixture("partial", work / "fx")
        big = make_bench_model(200, 0.8, work / "bench-a0.8-F16.gguf").integrated
        models = [
            (fetch(), "Gemma 3 270M Q4_K_M (real)", None),
            (quantize(fx.path, work / "fixture-Q4_K_M.gguf", "Q4_K_M"), "qwen35 fixture Q4_K_M (MTP)", None),
            (quantize(big, work / "bench-Q4_K_M.gguf", "Q4_K_M"), "qwen35 200 MB benchmark Q4_K_M (MTP)", None),
            (quantize(big, work / "bench-Q8_0.gguf", "Q8_0"), "qwen35 200 MB benchmark Q8_0 (MTP)", None),
            (big, "qwen35 200 MB benchmark F16 (MTP)", None),
        ]
        if a.exact_lib:
            models.append((big, "qwen35 200 MB benchmark F16 (MTP)", a.exact_lib))
        for path, label, lib in models:
            for exact in (False, True):
                r = row(path, label, exact, a.tokens, lib)
                rows.append(r)
                if not a.json:
                    per = " / ".join(f"{w['flips_per_1000']:.0f}" for w in r["widths"][:3])
                    mtp = ", ".join(("=" if m["identical"] else "≠") + str(m["depth"]) for m in r["mtp"]) or "no MTP"
                    print(
                        f"| {label} | {r['build']} | {'on' if exact else 'off'} | {r['noise']:.4f} | {per} | {mtp} | "
                        f"{'yes' if r['exact'] else 'no'} | {r['prefill']:.0f} | {r['decode']:.1f} |",
                        flush=True,
                    )
    if a.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
