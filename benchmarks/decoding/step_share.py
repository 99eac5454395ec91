"""How much of a step's wall time is spent outside llama.cpp, with N sequences in slots.

    python -m benchmarks.decoding.step_share [--model M] [--clients 1,4,8] [--tokens 256] [--depths off,3]

Loads the model (the bundled demo by default) with as many slots as the largest N, runs N
greedy generations at once on the engine (in process, no HTTP), and reads the model's
batcher: the seconds its decodes took (target and MTP, inside llama.cpp) against the wall
time from the first submission to the last result. What is left is this program's own
cost per step — the sequences' Python, the scheduler, the events — as a share of the wall
time and in microseconds per target step. The jobs are submitted as
the HTTP server submits them: no per-round events, and each event handed to a callback on
the engine thread (the server's bridge) rather than to a queue another thread wakes for at
every token. Prints one JSON line per (depth, N).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from pathlib import Path

from engine.runtime import jobs as J
from engine.runtime.decode.depth import Mtp
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from engine.synth.demo import demo_model_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.decoding.step_share", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=demo_model_path())
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--depths", default="off,3")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    clients = [int(x) for x in a.clients.split(",")]
    with Engine(EngineConfig(prompt_cache_mb=0)) as eng:
        eng.submit(J.LoadModel(LoadSpec(a.model, n_ctx=1024, fit="off", parallel=max(clients), name="m"))).result(300)
        batcher = eng.submit(J.Call(lambda st, *_: st.get("m").slots.batcher)).result(60)
        for depth in a.depths.split(","):
            for n in clients:
                shares = []
                for r in range(a.rounds):
                    how = {"mtp": Mtp.OFF} if depth == "off" else {"draft_depth": depth}
                    jobs = [
                        J.Generate(
                            prompt=f"Round {r}, story {i}: once upon a time",
                            max_tokens=a.tokens,
                            ignore_eog=True,
                            model="m",
                            rounds=False,
                            **how,
                        )
                        for i in range(n)
                    ]
                    before = getattr(batcher, "decode_seconds", None)
                    steps_before = batcher.steps
                    t0 = time.perf_counter()
                    sink: deque = deque(maxlen=64)  # the bridge's buffer, less its wake-ups of the loop
                    handles = [eng.submit(j, on_event=sink.append) for j in jobs]
                    tokens = sum(len(h.result(600).tokens) for h in handles)
                    wall = time.perf_counter() - t0
                    inside = None if before is None else batcher.decode_seconds - before  # an older batcher: no clock
                    steps = max(batcher.steps - steps_before, 1)
                    outside = None if inside is None else wall - inside
                    shares.append((tokens / wall, None if outside is None else (outside / wall, outside / steps * 1e6)))
                shares.sort(key=lambda x: x[0])
                tps, share = shares[len(shares) // 2]
                print(
                    json.dumps(
                        {
                            "depth": depth,
                            "n": n,
                            "outside_llama_cpp": None if share is None else round(share[0], 3),
                            # the same time per target step, in microseconds (the prompts' and
                            # the requests' own costs spread over the steps): what a faster or
                            # slower decode does not change
                            "outside_us_per_step": None if share is None else round(share[1], 1),
                            "tok_s": round(tps, 1),
                            "rounds": a.rounds,
                        }
                    )
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
