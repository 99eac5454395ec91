"""Concurrent clients against an OpenAI-compatible endpoint: aggregate throughput and what
each client sees (``mtp-studio bench slots``).

N clients each send one streamed greedy completion at the same moment; the figures are
the tokens of all of them per second of wall time, and per client the time per token
after its first (its generation time over its tokens) and the time to its first token.
The same measurement runs against this app's endpoint (arms: request values such as MTP
off or a draft depth) and against llama-server processes started on the same file (arms:
their command lines), in alternating rounds: this machine's speed drifts between
launches, so every arm's round r runs between the others' rounds r. Each run's prompts
open with the round, the number of clients and the arm, so no server has seen them before:
llama-server keeps each slot's last prompt (and a checkpoint of its recurrent state near
the prompt's end) even with ``--cache-ram 0``, and our arms share one server: a prompt seen
at N = 1 and again at N = 2 of the same round, or by the arm before, would be reused, and
the reuse would count in that arm's time, not its decoding.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx

from benchmarks.serving.servers import ServerProcess, add_llama_server_args, find_llama_server, timed_stream
from engine.cli import EXIT_INVALID, EXIT_USAGE, die
from engine.runtime.llama.lib import default_threads

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
    tokens, first, last = timed_stream(c, url + "/v1/completions", body, lambda ch: ch.get("text"))
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


def versus(results: dict[str, dict[int, list[Run]]], mine: list[str], theirs: list[str]) -> dict[int, float]:
    """Per client count, the median over rounds of the best of ``mine`` in round r over the
    best of ``theirs`` in the same round r (the issue's "best arm against best arm"; a
    ratio within a round escapes the machine's drift between rounds)."""
    out: dict[int, float] = {}
    mine = [m for m in mine if m in results]
    theirs = [t for t in theirs if t in results]
    if not mine or not theirs:
        return out
    for n in results[mine[0]]:
        rounds = min(len(results[a].get(n, [])) for a in mine + theirs)
        ratios = []
        for r in range(rounds):
            ours = max(results[a][n][r].tokens_per_second for a in mine)
            best = max(results[a][n][r].tokens_per_second for a in theirs)
            if best > 0:
                ratios.append(ours / best)
        if ratios:
            out[n] = round(statistics.median(ratios), 3)
    return out


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="N clients each stream one greedy completion at once, against this app's endpoint (the model "
        "loaded with --parallel slots) and, with --llama-server, against llama-server -np PARALLEL with draft-mtp "
        "and without speculation, in alternating rounds.",
    )
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--clients", default="1,2,4,8", help="numbers of concurrent clients (default 1,2,4,8)")
    p.add_argument(
        "--arms", default="auto,off,1,2,3", help="our arms: auto, off or a fixed depth (default auto,off,1,2,3)"
    )
    p.add_argument("--parallel", type=int, default=4, help="slots, ours and llama-server's (default 4)")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="measured rounds per arm and client count (default 2)")
    p.add_argument("--ctx", type=int, default=1024, help="context per slot (default 1024)")
    add_llama_server_args(p)
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.serving.slots") -> int:
    args = parser(prog).parse_args(argv)
    try:
        clients = [int(x) for x in args.clients.split(",") if x.strip()]
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        for a in arms:
            if a not in ("auto", "off") and not a.isdigit():
                raise ValueError(f"unknown arm {a!r}")
    except ValueError as e:
        return die(f"--clients / --arms: {e}", EXIT_USAGE)
    binary = find_llama_server(args.llama_server)
    threads = default_threads()
    servers: dict[str, ServerProcess] = {}
    results: dict[str, dict[int, list]] = {}
    try:
        ours = servers["ours"] = ServerProcess.ours(
            args.model,
            ["--parallel", str(args.parallel), "--ctx", str(args.ctx), "--cache-ram", "0"]
            + ["--max-pending", "256", "--no-fit-check"],
        )
        ours_model = ours.model_name()
        targets: dict[str, tuple[str, str, dict]] = {}
        for a in arms:
            extra = {"mtp": "off"} if a == "off" else {"draft_depth": a if a == "auto" else int(a)}
            # MTP's drafts only: every arm sends the round's prompts, so drafts from the
            # store of recent outputs would copy the last arm's answers
            extra["suffix_drafts"] = False
            targets[f"ours {a}"] = (ours.url, ours_model, extra)
        if binary:
            common = ["-np", str(args.parallel), "-c", str(args.ctx * args.parallel), "--cache-ram", "0"]
            spec = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(args.llama_mtp_depth)]
            for name, extra_args in (
                (f"llama-server draft-mtp {args.llama_mtp_depth}", spec),
                ("llama-server no speculation", []),
            ):
                servers[name] = ServerProcess.llama_server(binary, args.model, common + extra_args, threads)
                targets[name] = (servers[name].url, "bench", {})
        for name, (url, model, extra) in targets.items():  # warm-up
            measure(url, model, 1, 16, extra)
        for r in range(args.rounds):
            for n in clients:
                for k, (name, (url, model, extra)) in enumerate(targets.items()):
                    # a prompt no server has seen: not in an earlier round, nor at another N of
                    # this round, nor (our arms share one server) in another arm's run
                    run = measure(url, model, n, args.tokens, extra, opening=f"Round {r + 1}.{n}.{k}. ")
                    results.setdefault(name, {}).setdefault(n, []).append(run)
    except (RuntimeError, OSError) as e:
        return die(f"bench slots: {e}", EXIT_INVALID)
    finally:
        for s in servers.values():
            s.stop()
    body = {
        "model": args.model.name,
        "parallel": args.parallel,
        "tokens": args.tokens,
        "rounds": args.rounds,
        "threads": threads,
        "llama_server": binary,
        "arms": {name: {str(n): summarise(runs) for n, runs in per.items()} for name, per in results.items()},
    }
    ours_arms = {name: per for name, per in results.items() if name.startswith("ours ")}
    if "ours auto" in ours_arms and len(ours_arms) > 1:
        body["auto_vs_worst_paired"] = {str(n): r for n, r in paired(ours_arms, "ours auto").items()}
    llama = [name for name in results if name.startswith("llama-server")]
    if llama:
        body["versus_llama_server"] = {
            "best": {str(n): r for n, r in versus(results, list(ours_arms), llama).items()},
            "off": {str(n): r for n, r in versus(results, ["ours off"], ["llama-server no speculation"]).items()},
        }
    if args.json:
        print(json.dumps(body))
        return 0
    _print(body, clients, args.rounds)
    return 0


def _print(body: dict, clients: list[int], rounds: int) -> None:
    print(
        f"{body['model']}: {body['tokens']}-token greedy completions, {body['parallel']} slots, medians of "
        f"{rounds} rounds (aggregate tok/s; per-client ms/token p50/p95)"
    )
    print(f"{'arm':<34}" + "".join(f"{'N=' + str(n):>22}" for n in clients))
    for name, per in body["arms"].items():
        cells = "".join(
            f"{per[str(n)]['tokens_per_second']:>9.1f} ({per[str(n)]['per_token_ms_p50']:.1f}/"
            f"{per[str(n)]['per_token_ms_p95']:.1f})".rjust(22)
            for n in clients
        )
        print(f"{name:<34}{cells}")
    if "auto_vs_worst_paired" in body:
        print(
            f"{'auto / the arm it does worst against':<34}"
            + "".join(f"{body['auto_vs_worst_paired'].get(str(n), float('nan')):>22.3f}" for n in clients)
            + "  (of ours; medians of the ratios within rounds)"
        )
    for key, label in (("best", "ours best / llama-server best"), ("off", "ours off / llama no speculation")):
        per = body.get("versus_llama_server", {}).get(key)
        if per:
            print(
                f"{label:<34}"
                + "".join(f"{per.get(str(n), float('nan')):>22.3f}" for n in clients)
                + "  (medians of the ratios within rounds)"
            )
    if not body["llama_server"]:
        print("llama-server: not found (pass --llama-server PATH); its arms were skipped")


if __name__ == "__main__":
    raise SystemExit(main())
