"""count_tokens latency while streams run: what Claude Code meets beside its own streams.

    python -m benchmarks.serving.count_latency [--model M] [--streams 4] [--counts 40]

Serves the model (the bundled demo by default) with as many slots as streams, starts that many
greedy streams of ``--tokens`` tokens, and while they run asks
``/v1/messages/count_tokens`` ``--counts`` times with the official ``anthropic`` client, one
after another; prints the latencies' median, p95 and maximum, and how many counts came back
before the first stream ended. The same with no stream running is the baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings
from engine.synth.demo import demo_model_path

ASK = [{"role": "user", "content": "Read the file src/main.py and tell me what the function parse_args returns."}]


def _latencies(client, n: int, stop: threading.Event | None = None) -> list[tuple[float, float]]:
    """(latency in ms, when it came back) of up to ``n`` counts, one after another."""
    out = []
    for _ in range(n):
        if stop is not None and stop.is_set():
            break
        t = time.perf_counter()
        client.messages.count_tokens(model="m", messages=ASK)
        done = time.perf_counter()
        out.append(((done - t) * 1000, done))
    return out


def _figures(runs: list[tuple[float, float]]) -> dict:
    ms = sorted(m for m, _ in runs)
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p95_ms": round(ms[max(0, int(0.95 * len(ms)) - 1)], 2),
        "max_ms": round(ms[-1], 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.serving.count_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=demo_model_path())
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--counts", type=int, default=40)
    a = ap.parse_args(argv)
    from anthropic import Anthropic
    from openai import OpenAI

    eng = Engine(EngineConfig(prompt_cache_mb=0)).start()
    eng.submit(J.LoadModel(LoadSpec(a.model, n_ctx=2048, fit="off", parallel=a.streams, name="m"))).result(300)
    srv = ServerThread(eng, ServerSettings(port=0)).start()
    srv.wait_ready()
    try:
        client = Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
        idle = _latencies(client, a.counts)
        started = [threading.Event() for _ in range(a.streams)]
        first_end = threading.Event()
        ends: list[float] = []

        def stream(i: int) -> None:
            with OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0) as oc:
                for c in oc.completions.create(
                    model="m",
                    prompt=f"Story {i}: once upon a time",
                    max_tokens=a.tokens,
                    temperature=0,
                    stream=True,
                    extra_body={"ignore_eos": True},
                ):
                    if c.choices and c.choices[0].text:
                        started[i].set()
            ends.append(time.perf_counter())
            first_end.set()

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(a.streams)]
        for t in threads:
            t.start()
        for ev in started:
            ev.wait(120)
        busy = _latencies(client, a.counts, first_end)
        for t in threads:
            t.join(600)
        before_end = sum(1 for _, done in busy if done < min(ends))
    finally:
        srv.stop()
        eng.stop()
    print(
        json.dumps(
            {
                "model": a.model.name,
                "streams": a.streams,
                "idle": _figures(idle),
                "while_streaming": _figures(busy),
                "counts_before_a_stream_ended": before_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
