"""``mtp-studio bench server``: what the HTTP endpoint costs over the in-process engine.

Time-to-first-token and decode tokens/s of the same streamed requests, submitted to the
engine directly and through HTTP (SSE), alternating; then throughput with several
concurrent clients. Greedy decoding, so every path produces the same tokens.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

PROMPTS = [
    "Write a haiku about the sea.",
    "What is the capital of France?",
    "Explain recursion to a child.",
    "List three colours.",
]


@dataclass
class Sample:
    ttft_ms: float
    tokens: int
    decode_s: float

    @property
    def tps(self) -> float:
        return (self.tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


def _in_process(engine: Engine, model: str, prompt: str, max_tokens: int) -> Sample:
    t0 = time.perf_counter()
    first = None
    n = 0
    for ev in engine.submit(J.Generate(model=model, prompt=prompt, max_tokens=max_tokens, ignore_eog=True)).events():
        if isinstance(ev, J.Tokens):
            n += len(ev.tokens)
            # the first visible text, as the HTTP stream's first chunk carries (a token that
            # ends mid UTF-8 sequence has no text of its own yet)
            if first is None and ev.text:
                first = time.perf_counter()
    end = time.perf_counter()
    return Sample((first - t0) * 1000, n, end - first)


class _Client:
    """One keep-alive HTTP/1.1 connection (the standard library's: the bench must run in
    an install without the test extra)."""

    def __init__(self, url: str, timeout: float = 300):
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)

    def sse_lines(self, path: str, body: dict):
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
        for raw in r:
            yield raw.decode().rstrip("\r\n")

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc) -> None:
        self.conn.close()


def _http(client: _Client, model: str, prompt: str, max_tokens: int) -> Sample:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    t0 = time.perf_counter()
    first = None
    for line in client.sse_lines("/v1/completions", body):
        if line.startswith("data: {") and first is None:
            first = time.perf_counter()
        if line.startswith("data: {"):
            final = json.loads(line[6:])
    end = time.perf_counter()
    return Sample((first - t0) * 1000, final["timings"]["predicted_n"], end - first)


def run(model_path: Path, *, max_tokens: int, requests: int, clients: list[int], ctx: int, as_json: bool) -> int:
    with Engine(EngineConfig(request=Defaults(draft_depth="auto"))) as engine:
        info = engine.submit(J.LoadModel(LoadSpec(model_path, n_ctx=ctx))).result()
        model = info.name
        server = ServerThread(engine, ServerSettings(port=0, max_pending=256)).start()
        server.wait_ready()
        try:
            with _Client(server.url) as client:
                for p in PROMPTS:  # warm-up both paths
                    _in_process(engine, model, p, 8)
                    _http(client, model, p, 8)
                inproc, http = [], []
                for i in range(requests):
                    # a unique start per request: neither path reuses the other's KV cache
                    p = PROMPTS[i % len(PROMPTS)]
                    inproc.append(_in_process(engine, model, f"[{i}a] {p}", max_tokens))
                    http.append(_http(client, model, f"[{i}b] {p}", max_tokens))
            conc = {}
            for n in clients:
                per = max(1, requests // n)
                done_tokens = [0]
                lock = threading.Lock()

                def worker(k: int) -> None:
                    with _Client(server.url) as c:
                        for j in range(per):
                            s = _http(c, model, PROMPTS[(k + j) % len(PROMPTS)], max_tokens)
                            with lock:
                                done_tokens[0] += s.tokens

                t0 = time.perf_counter()
                threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
                conc[n] = {
                    "requests": n * per,
                    "tokens": done_tokens[0],
                    "seconds": wall,
                    "tokens_per_second": done_tokens[0] / wall,
                }
        finally:
            server.stop()

    def med(xs):
        return statistics.median(xs)

    result = {
        "model": model,
        "requests": requests,
        "max_tokens": max_tokens,
        "ttft_ms_in_process": med([s.ttft_ms for s in inproc]),
        "ttft_ms_http": med([s.ttft_ms for s in http]),
        "overhead_ms_per_request": med([h.ttft_ms - s.ttft_ms for h, s in zip(http, inproc)]),
        "tokens_per_second_in_process": med([s.tps for s in inproc]),
        "tokens_per_second_http": med([s.tps for s in http]),
        "concurrent": conc,
    }
    result["tokens_per_second_loss"] = 1 - result["tokens_per_second_http"] / result["tokens_per_second_in_process"]
    if as_json:
        print(json.dumps(result))
    else:
        print(f"model {model}, {requests} requests x {max_tokens} tokens, streamed")
        print(
            f"time to first token: in-process {result['ttft_ms_in_process']:.1f} ms, HTTP "
            f"{result['ttft_ms_http']:.1f} ms "
            f"(overhead {result['overhead_ms_per_request']:.2f} ms/request)"
        )
        print(
            f"decode tokens/s: in-process {result['tokens_per_second_in_process']:.1f}, HTTP "
            f"{result['tokens_per_second_http']:.1f} ({100 * result['tokens_per_second_loss']:+.1f}% loss)"
        )
        for n, c in conc.items():
            print(f"{n:3d} concurrent clients: {c['tokens_per_second']:.1f} tokens/s total ({c['requests']} requests)")
    return 0


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="HTTP endpoint overhead vs in-process, and concurrent throughput."
    )
    p.add_argument("--model", type=Path, required=True)
    # long enough that a request's decode rate is not dominated by its first few rounds
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--clients", default="1,4,16")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.serving.endpoint_overhead") -> int:
    args = parser(prog).parse_args(argv)
    clients = [int(x) for x in args.clients.split(",") if x.strip()]
    return run(
        args.model, max_tokens=args.max_tokens, requests=args.requests, clients=clients, ctx=args.ctx, as_json=args.json
    )


if __name__ == "__main__":
    raise SystemExit(main())
