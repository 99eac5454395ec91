"""The bundled demo's figures, for docs/demo-model.md and release notes: how it was trained
(from ``resources/demo.json``), the A/B benchmark on code prompts (tok/s plain vs MTP at
depths 1-3 and auto, acceptance by draft position), and unedited greedy samples. Prints
figures; not a test.

    python -m benchmarks.decoding.demo [--runs 3] [--tokens 128] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from engine.synth.demo import demo_manifest_path, demo_model_path

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "benchmarks" / "demo_prompts.json"
SAMPLES = (
    ("code completion", "prompt", 'def read_lines(path):\n    """Return the lines of the text file at path."""\n'),
    ("docstring-style answer", "chat", "What does the function os.path.join do?"),
    ("chat reply", "chat", "Hello! What can you do?"),
)


def samples(tokens: int) -> list[dict]:
    from engine.runtime import jobs as J
    from engine.runtime.engine import Engine
    from engine.runtime.load.loader import LoadSpec

    out = []
    with Engine() as eng:
        eng.submit(J.LoadModel(LoadSpec(demo_model_path()))).result(120)
        for kind, how, text in SAMPLES:
            job = (
                J.Generate(prompt=text, max_tokens=tokens, draft_depth="auto")
                if how == "prompt"
                else J.Generate(messages=[{"role": "user", "content": text}], max_tokens=tokens, draft_depth="auto")
            )
            r = eng.submit(job).result(120)
            out.append(
                {
                    "kind": kind,
                    "input": text,
                    "output": r.text,
                    "finish_reason": r.finish_reason,
                    "acceptance": r.stats.acceptance,
                }
            )
    return out


def ab(runs: int, tokens: int, exact: bool) -> dict:
    """The A/B benchmark's JSON. Arms whose output differs from plain decoding (llama.cpp's
    batch noise at a near-tie, default mode only) are reported, not an error here."""
    cmd = [
        sys.executable,
        "-m",
        "app.launcher",
        "bench",
        "--model",
        str(demo_model_path()),
        "--prompts",
        str(PROMPTS),
        "--depths",
        "0,1,2,3,auto",
        "--runs",
        str(runs),
        "--max-tokens",
        str(tokens),
        "--json",
    ]
    if exact:
        cmd.append("--exact")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if not res.stdout.strip():
        raise SystemExit(f"the benchmark failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.demo")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--exact", action="store_true", help="also run the A/B benchmark in exact mode")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    manifest = json.loads(demo_manifest_path().read_text())
    body = {
        "manifest": {k: manifest[k] for k in ("sha256", "bytes", "weights", "parameters", "held_out", "training")},
        "ab": ab(a.runs, a.tokens, False),
        "samples": samples(96),
    }
    if a.exact:
        body["ab_exact"] = ab(a.runs, a.tokens, True)
    if a.json:
        print(json.dumps(body))
        return 0
    t = manifest["training"]
    print(
        f"demo: {manifest['parameters']:,} parameters, {manifest['weights']}, {manifest['bytes']:,} bytes; "
        f"trained {t['steps']} steps in {t['seconds'] / 60:.1f} min on one thread of {t['cpu']} (torch {t['torch']})"
    )
    h = manifest["held_out"]
    print(
        f"held-out: trunk loss {h['trunk_loss']:.4f}, MTP loss {h['mtp_loss']:.4f}, "
        f"MTP top-1 = trunk top-1 on {h['mtp_agreement'] * 100:.1f}% of positions"
    )
    for key, label in (("ab", "default mode"), ("ab_exact", "exact mode")):
        if key not in body:
            continue
        print(
            f"A/B, {label}, {len(body[key]['arms'][0].get('runs', [])) or a.runs} runs × {a.tokens} tokens × "
            f"{len(json.loads(PROMPTS.read_text()))} code prompts:"
        )
        print(
            f"{'depth':>6} {'tok/s':>9} {'speedup':>8} {'accept':>7} {'mean len':>9}  acceptance by position  identical"
        )
        for arm in body[key]["arms"]:
            pos = ", ".join(f"{x:.2f}" for x in arm["acceptance_by_position"]) or "-"
            print(
                f"{arm['depth']:>6} {arm['tokens_per_second_median']:9.1f} {arm['speedup']:7.2f}x "
                f"{arm['acceptance']:7.2f} "
                f"{arm['mean_accept_len']:9.2f}  {pos:<22}  {arm['identical']}"
            )
            if arm["depth"] == "auto" and arm.get("depth_choices"):
                print(
                    "       auto chose depths (rounds): "
                    + ", ".join(f"{k}: {v}" for k, v in arm["depth_choices"].items())
                )
            for m in sorted(set(arm.get("mismatches", [])))[:2]:
                print(f"       {m}")
    for s in body["samples"]:
        print(
            f"\n--- {s['kind']} (acceptance {s['acceptance']:.2f}, {s['finish_reason']})\n>>> "
            f"{s['input']}\n{s['output']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
