"""Pooling over llama.cpp RPC, measured on one machine: tokens/s on this machine alone
against 1 and 2 loopback RPC servers, plain greedy and MTP (auto); llama.cpp round trips
per emitted token (a counting relay in front of each server); the same with the relay
adding latency per round trip, a stand-in for a real network; and load time with and
without the servers' weight cache. Prints figures; not a test.

    python -m benchmarks.models.rpc [--size-mb 200] [--acceptance 0.8] [--tokens 128] [--runs 3]
                             [--delays-ms 0.2,1] [--demo]

Every setup runs in this process through the engine (a pooled model runs in its worker
process, as in the app). Servers are `rpc serve` children with this machine's CPU (one
thread each by default). On one machine the "remote" devices share its cores and memory
bus, so absolute figures are not a cluster's; the round trips per token are what a real
network multiplies by its latency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

PROMPTS = ["The history of the river town", "def parse(items):", "Dear team, about the release", "List ten facts"]


def _measure(spec, arms, tokens: int, runs: int, proxies=()) -> dict:
    from engine.runtime import jobs as J
    from engine.runtime.engine import Engine

    out = {}
    with Engine() as eng:
        t0 = time.perf_counter()
        eng.submit(J.LoadModel(spec)).result()
        load_s = time.perf_counter() - t0
        for arm in arms:
            rates, rts, emitted, forwards = [], 0, 0, 0
            for r in range(runs + 1):  # run 0 warms up (and teaches auto)
                for p in proxies:
                    p.reset()
                for prompt in PROMPTS:
                    job = J.Generate(
                        prompt=prompt,
                        max_tokens=tokens,
                        ignore_eog=True,
                        mtp="off" if arm == "plain" else "on",
                        draft_depth=None if arm == "plain" else arm,
                    )
                    g = eng.submit(job).result()
                    if r:
                        rates.append(g.stats.tokens_per_second)
                        emitted += len(g.tokens)
                        forwards += g.stats.target_forwards
                if r:
                    rts += sum(p.round_trips for p in proxies)
            out[arm] = {
                "tokens_per_second": round(statistics.median(rates), 1),
                "round_trips_per_token": round(rts / emitted, 3) if proxies else None,
                "forwards_per_token": round(forwards / emitted, 3),
            }
        out["load_s"] = round(load_s, 3)
    return out


SERVER_THREADS = 1


def _servers(n: int, **kw):
    import socket

    from engine.rpc.server import RpcServer, ServerOptions

    kw.setdefault("threads", SERVER_THREADS)

    servers = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        servers.append(RpcServer(ServerOptions(port=port, **kw)).start())
    return servers


def _load_times(model: Path, cache_root: Path, rates_mbit: list[float | None], repeats: int = 2) -> dict:
    """Seconds to load over one server, without the weight cache and with it (the first
    load fills it), at each link rate (None: loopback speed); and bytes sent."""
    from engine.rpc.proxy import CountingProxy
    from engine.runtime import jobs as J
    from engine.runtime.engine import Engine
    from engine.runtime.load.loader import LoadSpec

    res = {}
    for rate in rates_mbit:
        link = "loopback" if rate is None else f"{rate:g} Mbit/s"
        for label, kw in (("no cache", {}), ("cache", {"cache": True, "cache_dir": cache_root / f"rpc-cache-{rate}"})):
            (server,) = _servers(1, **kw)
            proxy = CountingProxy(server.endpoint, rate=None if rate is None else rate * 1e6 / 8)
            times, sent = [], []
            try:
                for _ in range(repeats):
                    proxy.reset()
                    with Engine() as eng:
                        t0 = time.perf_counter()
                        eng.submit(J.LoadModel(LoadSpec(model, n_ctx=1024, rpc=(str(proxy.endpoint),)))).result()
                        times.append(round(time.perf_counter() - t0, 3))
                    sent.append(proxy.bytes_up)
            finally:
                proxy.close()
                server.stop()
            res[f"{link}, {label}"] = {"seconds": times, "bytes_sent": sent}
    return res


def wide_model(out: Path) -> Path:
    """A ~480 MB constructed model whose FFN matrices (2048 x 4096 F16, 16 MiB) are over
    llama.cpp's 10 MiB threshold for the RPC weight cache (the 200 MB model's are not)."""
    from dataclasses import replace

    from engine.synth.benchmodel import bench_spec
    from engine.synth.qwen35 import build_model

    spec = replace(
        bench_spec(200, 0.8),
        n_embd=2048,
        n_ff=4096,
        n_head=16,
        n_head_kv=4,
        head_dim=128,
        n_trunk=4,
        ssm_v_heads=16,
        ssm_groups=8,
        name="RPC cache benchmark (constructed, 2048 wide)",
    )
    build_model(spec, out)
    return out


def run(
    model: Path,
    *,
    tokens: int,
    runs: int,
    delays_ms: list[float],
    arms: list[str],
    rates_mbit: list,
    decode: bool = True,
) -> dict:
    from engine.rpc.proxy import CountingProxy
    from engine.runtime.load.loader import LoadSpec

    body: dict = {"model": str(model), "size_bytes": model.stat().st_size, "tokens": tokens, "runs": runs, "setups": {}}
    if not decode:
        with tempfile.TemporaryDirectory(prefix="mtp-rpc-cache-") as tmp:
            body["load_seconds"] = _load_times(model, Path(tmp), rates_mbit)
        return body
    spec = lambda rpc=(): LoadSpec(model, n_ctx=1024, max_draft_depth=4, rpc=tuple(str(e) for e in rpc))  # noqa: E731
    body["setups"]["local"] = _measure(spec(), arms, tokens, runs)
    for n in (1, 2):
        servers = _servers(n)
        proxies = [CountingProxy(s.endpoint) for s in servers]
        try:
            body["setups"][f"{n} server{'s' if n > 1 else ''}"] = _measure(
                spec([p.endpoint for p in proxies]), arms, tokens, runs, proxies
            )
        finally:
            for p in proxies:
                p.close()
            for s in servers:
                s.stop()
    for d in delays_ms:
        (server,) = _servers(1)
        proxy = CountingProxy(server.endpoint, delay=d / 1000)
        try:
            body["setups"][f"1 server, +{d:g} ms per round trip"] = _measure(
                spec([proxy.endpoint]), arms, tokens, runs, [proxy]
            )
        finally:
            proxy.close()
            server.stop()
    with tempfile.TemporaryDirectory(prefix="mtp-rpc-cache-") as tmp:
        body["load_seconds"] = _load_times(model, Path(tmp), rates_mbit)
    return body


def _print(body: dict) -> None:
    print(
        f"\n{Path(body['model']).name}: {body['size_bytes'] / 2**20:.1f} MiB, {body['tokens']} tokens x "
        f"{len(PROMPTS)} prompts x {body['runs']} runs (medians)"
    )
    if body["setups"]:
        print(f"{'setup':<34} {'arm':>6} {'tok/s':>9} {'vs plain':>9} {'round trips/token':>18} {'forwards/token':>15}")
    for name, s in body["setups"].items():
        plain = s["plain"]["tokens_per_second"]
        for arm, a in s.items():
            if arm == "load_s":
                continue
            rt = "-" if a["round_trips_per_token"] is None else f"{a['round_trips_per_token']:.2f}"
            print(
                f"{name:<34} {arm:>6} {a['tokens_per_second']:9.1f} {a['tokens_per_second'] / plain:8.2f}x {rt:>18} "
                f"{a['forwards_per_token']:15.2f}"
            )
    for label, r in body["load_seconds"].items():
        print(
            f"load over 1 server, {label}: "
            + ", ".join(
                f"{t:.3f} s ({b / 2**20:.1f} MiB sent)" for t, b in zip(r["seconds"], r["bytes_sent"], strict=True)
            )
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.models.rpc")
    ap.add_argument("--size-mb", type=int, default=200, help="constructed benchmark model size (default 200)")
    ap.add_argument("--acceptance", type=float, default=0.8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--delays-ms", default="0.2,1", help="latency the relay adds per round trip (a LAN stand-in)")
    ap.add_argument("--arms", default="plain,1,auto")
    ap.add_argument("--load-rates-mbit", default="loopback,1000", help="link rates for the load-time figures")
    ap.add_argument("--no-decode", action="store_true", help="only the load-time figures")
    ap.add_argument(
        "--cache-model",
        action="store_true",
        help="load-time figures on a 480 MB model with tensors the weight cache takes (> 10 MiB)",
    )
    ap.add_argument("--demo", action="store_true", help="also the bundled demo model")
    ap.add_argument(
        "--server-threads",
        type=int,
        default=1,
        help="CPU threads per loopback server (default 1: on a small machine the servers' and the "
        "client's spinning threads would fight over the same cores)",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    global SERVER_THREADS
    SERVER_THREADS = a.server_threads
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    os.environ.setdefault("MTP_STUDIO_HOME", tempfile.mkdtemp(prefix="mtp-rpc-home-"))  # fresh auto policies
    from engine.synth.benchmodel import make_bench_model
    from engine.synth.demo import demo_model_path

    delays = [float(x) for x in a.delays_ms.split(",") if x.strip()]
    arms = [x.strip() for x in a.arms.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="mtp-rpc-bench-") as tmp:
        models = [make_bench_model(a.size_mb, a.acceptance, Path(tmp) / "bench.gguf").integrated] if a.size_mb else []
        if a.cache_model:
            models.append(wide_model(Path(tmp) / "wide.gguf"))
        if a.demo:
            models.insert(0, demo_model_path())
        for m in models:
            rates = [None if x.strip() == "loopback" else float(x) for x in a.load_rates_mbit.split(",")]
            body = run(
                Path(m),
                tokens=a.tokens,
                runs=a.runs,
                delays_ms=delays,
                arms=arms,
                rates_mbit=rates,
                decode=not a.no_decode,
            )
            results.append(body)
            if not a.json:
                _print(body)
    if a.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
