"""Models served by name on demand: cold-load time, a stream's longest gap while another
model loads, and embeddings per second against llama-server ``--embedding``.

    python -m benchmarks.serving.ondemand [--big B200.gguf] [--llama-server PATH] [--rounds 3]

1. **Cold load.** The endpoint serves ``--big`` (the 200 MB bench model: ``bench
   make-model``) by name, not loaded; a streamed request naming it is timed to its first
   token. The first round runs the load probe's child (the benchmark keeps its caches in a
   folder of its own, so the file was never seen); later rounds
   unload the model first (``keep_alive: 0``) and load it again with the probe's verdict
   remembered, as every later start does.
2. **A stream while another model loads.** A greedy stream on the bundled demo (MTP off,
   so every step is one token) runs while a request naming ``--big`` loads it; the longest
   gap between its tokens during the load is printed against its median gap.
3. **Embeddings per second.** A MiniLM-sized embedding model (generated: 384 wide, 6
   layers, mean pooling) served by ``serve`` and by ``llama-server --embedding``, each in
   a process of its own, asked by 4 clients at once for batches of 16 texts; rounds
   alternate between the servers; texts per second, median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from benchmarks.serving.servers import ServerProcess, find_llama_server
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from engine.runtime.ondemand.catalog import Catalog
from engine.runtime.ondemand.residency import Residency
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings
from engine.synth.demo import demo_model_path

TEXTS = [
    f"Document {i}: the quick brown fox jumps over the lazy dog near the river bank, again and again."
    for i in range(16)
]


def _serve(paths: list[Path]) -> tuple[Engine, Residency, ServerThread]:
    eng = Engine(EngineConfig(prompt_cache_mb=0)).start()

    def spec_for(s):
        return LoadSpec(s.path, n_ctx=4096, parallel=2, name=s.name, fit="off")

    res = Residency(eng, Catalog(None, tuple(paths)), spec_for, max_loaded=4)
    srv = ServerThread(eng, ServerSettings(port=0, max_pending=64), residency=res).start()
    srv.wait_ready()
    return eng, res, srv


def _first_token_s(url: str, model: str) -> float:
    t0 = time.perf_counter()
    with httpx.stream(
        "POST",
        url + "/v1/completions",
        json={"model": model, "prompt": "Once", "max_tokens": 4, "stream": True},
        timeout=600,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                return time.perf_counter() - t0
    raise RuntimeError(f"no token from {model}")


def cold_load(big: Path, rounds: int) -> dict:
    eng, res, srv = _serve([big])
    name = big.name.removesuffix(".gguf")
    try:
        # the first round: a file this (fresh) cache folder has never probed
        out = {"first_with_probe_s": round(_first_token_s(srv.url, name), 3)}
        again = []
        for _ in range(rounds):
            r = httpx.post(srv.url + "/api/generate", json={"model": name, "keep_alive": 0}, timeout=120)
            assert name not in eng.models(), r.text
            again.append(_first_token_s(srv.url, name))
        out["cold_s"] = [round(x, 3) for x in again]
        out["cold_median_s"] = round(statistics.median(again), 3)
        return out
    finally:
        srv.stop()
        res.close()
        eng.stop()


def gap_while_loading(big: Path) -> dict:
    demo = demo_model_path()
    eng, res, srv = _serve([demo, big])
    a, b = demo.name.removesuffix(".gguf"), big.name.removesuffix(".gguf")
    try:
        _first_token_s(srv.url, a)  # A loaded first
        stamps: list[float] = []
        window: list[float] = []

        def load_b() -> None:
            time.sleep(0.5)
            t0 = time.perf_counter()
            _first_token_s(srv.url, b)
            window.extend([t0, time.perf_counter()])

        th = threading.Thread(target=load_b)
        body = {"model": a, "prompt": "Once", "max_tokens": 4000, "stream": True, "ignore_eos": True, "mtp": "off"}
        with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=600) as r:
            th.start()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    stamps.append(time.perf_counter())
        th.join()
        t0, t1 = window
        gaps = [y - x for x, y in zip(stamps, stamps[1:])]
        during = [g for g, y in zip(gaps, stamps[1:]) if t0 <= y <= t1 + 0.05]
        median = statistics.median(gaps)
        covered = stamps[0] < t0 and stamps[-1] > t1
        return {
            "load_s": round(t1 - t0, 3),
            "median_gap_ms": round(median * 1000, 3),
            "max_gap_during_load_ms": round(max(during) * 1000, 2) if during else None,
            "max_over_median": round(max(during) / median, 1) if during else None,
            "tokens_during_load": len(during),
            "stream_covered_the_load": covered,
        }
    finally:
        srv.stop()
        res.close()
        eng.stop()


def _embed_rate(url: str, model: str, seconds: float, clients: int = 4) -> float:
    done = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        with httpx.Client(timeout=120) as c:
            while time.perf_counter() < stop_at:
                r = c.post(url + "/v1/embeddings", json={"model": model, "input": TEXTS})
                r.raise_for_status()
                with lock:
                    done[0] += len(r.json()["data"])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0] / (time.perf_counter() - t0)


def embeddings(llama_server: str | None, rounds: int, seconds: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="mtp-embed-bench-"))
    made = subprocess.run(
        [sys.executable, "-m", "tests.synth.pooledmodels", str(tmp), "bench", "384", "6", "1536", "6"],
        capture_output=True,
        text=True,
        env=dict(os.environ, GGML_NO_BACKTRACE="1"),
        check=True,
    )
    model = Path(json.loads(made.stdout.strip().splitlines()[-1])["mean"])
    threads = str(os.cpu_count() or 2)
    ours = ServerProcess.ours(model, ["--ctx", "2048", "--max-pending", "256", "--threads", threads])
    servers = {"ours": ours}
    try:
        if llama_server:
            servers["llama-server"] = ServerProcess.llama_server(
                llama_server,
                model,
                ["--embedding", "--pooling", "mean", "-np", "4", "-c", "8192", "-b", "2048", "-ub", "2048"],
                int(threads),
            )
        names = {k: s.model_name() for k, s in servers.items()}
        for k, s in servers.items():  # warm up
            _embed_rate(s.url, names[k], 1.0)
        per: dict[str, list[float]] = {k: [] for k in servers}
        for _ in range(rounds):
            for k, s in servers.items():
                per[k].append(_embed_rate(s.url, names[k], seconds))
        out = {
            k: {"texts_per_second": round(statistics.median(v), 1), "rounds": [round(x, 1) for x in v]}
            for k, v in per.items()
        }
        if "llama-server" in per:
            ratios = [a / b for a, b in zip(per["ours"], per["llama-server"])]
            out["ours_over_llama_server"] = round(statistics.median(ratios), 3)
        return out
    finally:
        for s in servers.values():
            s.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.serving.ondemand", description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", type=Path, required=True, help="the 200 MB bench model (bench make-model)")
    ap.add_argument("--llama-server", default=None, help="llama-server binary (default: on PATH)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="each embeddings round")
    a = ap.parse_args(argv)
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    # a folder of its own for caches and settings: the first load is a first load, and the
    # user's caches are neither read nor written
    os.environ["MTP_STUDIO_HOME"] = tempfile.mkdtemp(prefix="mtp-ondemand-bench-")
    results = {
        "cold_load": cold_load(a.big, a.rounds),
        "stream_while_loading": gap_while_loading(a.big),
        "embeddings": embeddings(find_llama_server(a.llama_server), a.rounds, a.seconds),
    }
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
