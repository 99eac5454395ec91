"""What the persisted adaptive policy is worth: short auto requests against plain decoding
on a 200 MB benchmark model, with a cold policy (first request ever), a warm one (the
next requests), and after a restart (a new process that loads the saved policy).
Prints figures; not a test.

    python -m benchmarks.decoding.carryover [--acceptances 0,1] [--tokens 128] [--requests 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, statistics, sys
from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec
path, tokens, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
prompts = ["The history of the river town", "Write a story about a lighthouse", "def parse(items):", "Dear team,"]
out = {"auto": [], "plain": []}
with Engine(EngineConfig(request=Defaults(draft_depth="auto"))) as eng:
    eng.submit(J.LoadModel(LoadSpec(path, n_ctx=2048, max_draft_depth=8))).result()
    for i in range(requests):
        p = prompts[i % len(prompts)] + f" ({i})"
        for arm in ("auto", "plain"):
            mtp = "off" if arm == "plain" else "on"
            r = eng.submit(J.Generate(prompt=p, max_tokens=tokens, ignore_eog=True, mtp=mtp)).result()
            out[arm].append(r.stats.tokens_per_second)
print(json.dumps(out))
"""


def _run(model: Path, tokens: int, requests: int, home: str) -> dict:
    env = dict(os.environ, GGML_NO_BACKTRACE="1", MTP_STUDIO_HOME=home)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), str(tokens), str(requests)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.carryover")
    ap.add_argument("--acceptances", default="0,1")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=6)
    a = ap.parse_args(argv)
    from engine.synth.benchmodel import make_bench_model

    with tempfile.TemporaryDirectory(prefix="mtp-carry-") as tmp:
        for acc in (float(x) for x in a.acceptances.split(",")):
            model = make_bench_model(200, acc, Path(tmp) / f"a{acc}.gguf").integrated
            home = tempfile.mkdtemp(dir=tmp)
            first = _run(model, a.tokens, a.requests, home)  # cold, then warm
            again = _run(model, a.tokens, a.requests, home)  # a restart: the saved policy
            cold = first["auto"][0] / first["plain"][0]
            warm = [x / y for x, y in zip(first["auto"][1:], first["plain"][1:])]
            restart = again["auto"][0] / again["plain"][0]
            warm_after = [x / y for x, y in zip(again["auto"][1:], again["plain"][1:])]
            print(
                f"acceptance {acc}: auto / plain, {a.tokens}-token requests: cold first request {cold:.3f}; "
                f"warm (requests 2-{a.requests}) median {sorted(warm)[len(warm) // 2]:.3f} "
                f"[{min(warm):.3f}-{max(warm):.3f}]; first request after a restart {restart:.3f}; "
                f"later requests median {sorted(warm_after)[len(warm_after) // 2]:.3f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
