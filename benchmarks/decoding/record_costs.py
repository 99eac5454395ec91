"""Record what rounds cost at each fixed depth on a model, for the adaptive policy's tests
(``tests/engine/runtime/data/*_round_costs.json``): per depth, each round's parts and its
wall time (end of the round before to end of this one), steady rounds only (the round
before was at the same depth), and the acceptance of each draft position. Not a test.

    python -m benchmarks.decoding.record_costs --model resources/demo.gguf \
        --out tests/engine/runtime/data/demo_round_costs.json
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from benchmarks.decoding.demo import PROMPTS


def record(model: Path, depths: list[int], tokens: int, runs: int) -> dict:
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.load.loader import LoadSpec, load

    lm = load(LoadSpec(model, max_draft_depth=max(depths)))
    prompts = [lm.model.prompt_tokens(p) for p in json.loads(PROMPTS.read_text())]
    out: dict = {"model": model.name, "machine": platform.processor() or platform.machine(), "depths": {}}
    reach = [0] * max(depths)
    acc = [0] * max(depths)
    try:
        for run in range(runs + 1):
            for k in depths:
                for ids in prompts:
                    rounds = []
                    lm.session.reset()
                    generate(
                        lm.session,
                        ids,
                        DecodeParams(max_tokens=tokens, depth=FixedDepth(k) if k else None, ignore_eog=True),
                        on_round=rounds.append,
                    )
                    if run == 0:
                        continue  # warm-up
                    kept = out["depths"].setdefault(str(k), [])
                    for prev, r in zip(rounds, rounds[1:]):
                        if r.depth != k or prev.depth != k:
                            continue
                        kept.append(
                            [
                                round(r.verify_ms, 4),
                                round(r.draft_settle_ms, 4),
                                round(r.sync_ms, 4),
                                round((r.t - prev.t) * 1000, 4),
                            ]
                        )
                        for i in range(min(r.drafted, r.accepted + 1)):
                            reach[i] += 1
                            acc[i] += i < r.accepted
    finally:
        lm.close()
    out["acceptance"] = [round(a / n, 4) if n else None for a, n in zip(acc, reach)]
    out["fields"] = ["verify_ms", "draft_settle_ms", "sync_ms", "wall_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.record_costs")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--depths", default="0,1,2,3,4")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    res = record(a.model, [int(x) for x in a.depths.split(",")], a.tokens, a.runs)
    a.out.write_text(json.dumps(res, separators=(",", ":")) + "\n")
    print({k: len(v) for k, v in res["depths"].items()}, res["acceptance"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
