"""Concurrent clients against an OpenAI-compatible endpoint: aggregate throughput and what
each client sees (``mtp-studio bench slots``).

N clients each send one streamed greedy completion at the same moment; the figures are
the tokens of all of them per second of wall time, and per client the time per token
after its first (its generation time over its tokens) and the time to its first token.
The same measurement runs against this app's endpoint (arms: request values such as MTP
off or a draft depth) and against llama-server processes started on the same file (arms:
their command lines), in alternating rounds: this machine's speed drifts between
launches, so every arm's round r runs between the others' rounds r. Each round's prompts
open with the round's number, so no server reuses the last round's prompt: llama-server
keeps a checkpoint of each slot's recurrent state near its prompt's end even with
``--cache-ram 0``, and that reuse would count in its time per round, not its decoding.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx

from engine.runtime.llama import repack

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works to a ten-year-old.",
    "List the steps to bake a loaf of bread at home.",
    "Describe a walk through a forest in autumn.",
    "Summarise the rules of chess for a beginner.",
    "Give advice to someone starting their first job.",
    "Describe the water cycle in simple terms.",
    "Tell a story about a robot learning to paint.",
]


@dataclass
class Run:
    clients: int
    wall_s: float
    tokens: int
    per_token_ms: list[float] = field(default_factory=list)  # one per client
    first_token_ms: list[float] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


#: most seconds the clients take to be made before a round starts
READY_S = 60.0


def _one(
    url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    extra: dict,
    out: list,
    i: int,
    ready: threading.Barrier,
    start: threading.Event,
) -> None:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    # the client is made before the start: making one (its TLS context) costs tens of ms of
    # CPU, which would count in the round and in the first token's time
    with httpx.Client(timeout=600) as c:
        ready.wait(READY_S)
        start.wait()
        t0 = time.perf_counter()
        _stream(c, url, body, t0, out, i)


def _stream(c: httpx.Client, url: str, body: dict, t0: float, out: list, i: int) -> None:
    first = last = None
    tokens = 0
    with c.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"].get("completion_tokens", tokens)
            if any(ch.get("text") for ch in chunk.get("choices") or []):
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
    out[i] = (tokens, (first or t0) - t0, (last or t0) - (first or t0))


def measure(url: str, model: str, clients: int, max_tokens: int, extra: dict | None = None, opening: str = "") -> Run:
    """``clients`` completions at once, each of a prompt of :data:`PROMPTS` after ``opening``."""
    out: list = [None] * clients
    ready, start = threading.Barrier(clients + 1), threading.Event()
    prompts = [opening + PROMPTS[i % len(PROMPTS)] for i in range(clients)]
    threads = [
        threading.Thread(target=_one, args=(url, model, p, max_tokens, extra or {}, out, i, ready, start))
        for i, p in enumerate(prompts)
    ]
    for t in threads:
        t.start()
    ready.wait(READY_S)  # every client made (BrokenBarrierError, a RuntimeError, if one could not be)
    t0 = time.perf_counter()
    start.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if any(o is None for o in out):
        raise RuntimeError("a client got no reply")
    run = Run(clients, wall, sum(o[0] for o in out))
    for tokens, ttft, gen in out:
        run.first_token_ms.append(ttft * 1000)
        run.per_token_ms.append(gen * 1000 / max(tokens - 1, 1))
    return run


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


# ------------------------------------------------------------------ llama-server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """An endpoint in a process of its own on a free port — llama-server, or this app's
    ``serve`` (clients in the benchmark's process must not share an interpreter with the
    server they measure) — ready when it answers ``/health``; :meth:`stop` ends it."""

    def __init__(self, argv: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, GGML_NO_BACKTRACE="1")
        self.proc = subprocess.Popen(
            [*argv, "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{argv[0]} did not become ready")

    @classmethod
    def llama_server(cls, binary: str, model: Path, args: list[str], threads: int) -> ServerProcess:
        """llama-server on ``model``, with weight repacking as ours has it on this machine
        (like with like; and where this CPU's repacked kernels crash, llama-server dies
        with them on its first request unless started with ``--no-repack``)."""
        return cls(
            [
                binary,
                "-m",
                str(model),
                "--host",
                "127.0.0.1",
                "-t",
                str(threads),
                "--no-webui",
                *repack.llama_server_args(),
                *args,
            ]
        )

    @classmethod
    def ours(cls, model: Path, parallel: int, ctx: int) -> ServerProcess:
        return cls(
            [
                sys.executable,
                "-m",
                "app.launcher",
                "serve",
                "--model",
                str(model),
                "--parallel",
                str(parallel),
                "--ctx",
                str(ctx),
                "--cache-ram",
                "0",
                "--max-pending",
                "256",
                "--no-fit-check",
            ]
        )

    def model_name(self) -> str:
        return httpx.get(self.url + "/v1/models", timeout=10).json()["data"][0]["id"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def find_llama_server(given: str | None) -> str | None:
    return given or shutil.which("llama-server")


def summarise(runs: list[Run]) -> dict:
    """Medians over rounds: aggregate tok/s; p50/p95 over every client of every round."""
    per_tok = [x for r in runs for x in r.per_token_ms]
    ttft = [x for r in runs for x in r.first_token_ms]
    return {
        "tokens_per_second": round(statistics.median(r.tokens_per_second for r in runs), 1),
        "rounds": [round(r.tokens_per_second, 1) for r in runs],
        "per_token_ms_p50": round(pct(per_tok, 0.5), 2),
        "per_token_ms_p95": round(pct(per_tok, 0.95), 2),
        "first_token_ms_p50": round(pct(ttft, 0.5), 1),
    }


def paired(arms: dict[str, dict[int, list[Run]]], arm: str) -> dict[int, float]:
    """Per client count, ``arm`` against the other arm it does worst against, round by
    round: for each other arm the median over rounds of the ratio of their round r, and
    the smallest of those medians. An arm's round r runs beside the others' rounds r, so
    a ratio within a round escapes the machine's drift between rounds, which the medians
    of each arm carry. (A ratio to the best of the others in each round would be biased
    low: the largest of several noisy figures is above their typical value.)"""
    out: dict[int, float] = {}
    for n, runs in arms.get(arm, {}).items():
        per_arm = []
        for name, per in arms.items():
            ratios = [
                run.tokens_per_second / other.tokens_per_second
                for run, other in zip(runs, per.get(n, []))
                if other.tokens_per_second > 0
            ]
            if name != arm and ratios:
                per_arm.append(statistics.median(ratios))
        if per_arm:
            out[n] = round(min(per_arm), 3)
    return out
