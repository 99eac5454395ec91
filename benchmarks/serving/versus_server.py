"""Our loop against llama.cpp's own C++ loop on the same file: plain greedy decoding, MTP at
fixed depths and auto here; llama-server plain and ``--spec-type draft-mtp`` at
``--spec-draft-n-max`` 1-3 there. Prints figures; not a test.

    python -m benchmarks.serving.versus_server --server PATH/llama-server [--model M] [--rounds 5]

llama-server builds from the vendored source of the pinned llama-cpp-python
(``cmake -S vendor/llama.cpp -B build -DLLAMA_BUILD_SERVER=ON``, target ``llama-server``).

A small model's speed on this kind of machine moves between launches and within one
(the demo runs at ~2,000 or ~3,200 tok/s), for both programs. So the arms alternate in
rounds — each round runs every arm over every prompt, ours and theirs interleaved, in an
order that rotates — and every figure is the median over rounds of a ratio within one
round. Speed is decode speed after the prompt, the same on both sides: generated tokens
over the time from the first generated token to the last (llama-server's
``timings.predicted_per_second``). Same threads, context, prompts, token count; both
greedy, no prompt reuse between requests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import urllib.request
from pathlib import Path

from benchmarks.decoding.demo import PROMPTS
from benchmarks.serving.servers import ServerError, ServerProcess
from engine.synth.demo import demo_model_path

OURS = ("0", "1", "2", "3", "auto")
THEIRS = ("0", "1", "2", "3")  # 0: --spec-type none; k: draft-mtp with n-max k


def llama_server(exe: str, model: Path, arm: str, threads: int, ctx: int) -> ServerProcess:
    """One llama-server process for one arm."""
    args = ["-tb", str(threads), "-c", str(ctx), "-np", "1"]
    if arm != "0":
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", arm, "--spec-draft-n-min", "0"]
    return ServerProcess.llama_server(exe, model, args, threads, ready_s=120, name=f"llama-server ({arm})")


def complete(server: ServerProcess, prompt: str, tokens: int) -> tuple[int, float]:
    """One greedy completion: (tokens predicted, llama-server's milliseconds for them)."""
    body = {"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}
    req = urllib.request.Request(
        server.url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        t = json.loads(r.read())["timings"]
    return int(t["predicted_n"]), float(t["predicted_ms"])


def run(exe: str, model: Path, prompts: list[str], tokens: int, rounds: int, threads: int, ctx: int) -> dict:
    from engine.runtime.decode.policy.adaptive import AdaptiveDepth
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.load.loader import LoadSpec, load

    lm = load(LoadSpec(model, n_ctx=ctx, n_threads=threads, max_draft_depth=8))
    servers: dict[str, ServerProcess] = {}
    policies = {a: None if a == "0" else AdaptiveDepth(8) if a == "auto" else FixedDepth(int(a)) for a in OURS}
    toks = [lm.model.prompt_tokens(p) for p in prompts]
    arms = [("ours", a) for a in OURS] + [("llama-server", a) for a in THEIRS]
    per_round: list[dict[str, float]] = []
    try:
        for a in THEIRS:
            servers[a] = llama_server(exe, model, a, threads, ctx)
        for rnd in range(rounds + 1):  # round 0 warms up both sides (and auto's policy)
            n = dict.fromkeys(arms, 0)
            ms = dict.fromkeys(arms, 0.0)
            for i, (p, ids) in enumerate(zip(prompts, toks)):
                shift = (rnd * len(prompts) + i) % len(arms)
                for side, a in arms[shift:] + arms[:shift]:
                    if side == "ours":
                        lm.session.reset()
                        g = generate(
                            lm.session, ids, DecodeParams(max_tokens=tokens, depth=policies[a], ignore_eog=True)
                        )
                        got, t = g.stats.generated - 1, g.stats.generation_ms  # the first token comes from the prompt
                    else:
                        got, t = complete(servers[a], p, tokens)
                        got -= 1
                    n[(side, a)] += got
                    ms[(side, a)] += t
            if rnd:
                per_round.append({f"{s} {a}": n[(s, a)] / ms[(s, a)] * 1000 for s, a in arms})
    finally:
        for s in servers.values():
            s.stop()
        lm.close()
    return {"model": str(model), "tokens": tokens, "rounds": per_round, "ratios": ratios(per_round)}


def ratios(per_round: list[dict[str, float]]) -> dict[str, float]:
    """Medians over rounds of within-round ratios."""

    def med(f) -> float:
        return statistics.median(f(r) for r in per_round)

    def best(r: dict[str, float], side: str, arms) -> float:
        return max(r[f"{side} {a}"] for a in arms)

    fixed = ("1", "2", "3")
    out = {f"our {a} / our plain": med(lambda r, a=a: r[f"ours {a}"] / r["ours 0"]) for a in OURS[1:]}
    out["our auto / our best fixed depth"] = med(lambda r: r["ours auto"] / best(r, "ours", fixed))
    out["our best arm / our plain"] = med(lambda r: best(r, "ours", OURS[1:]) / r["ours 0"])
    out["our plain / llama-server plain"] = med(lambda r: r["ours 0"] / r["llama-server 0"])
    for a in fixed:
        out[f"llama-server n-max {a} / its plain"] = med(lambda r, a=a: r[f"llama-server {a}"] / r["llama-server 0"])
    out["our best arm / llama-server's best draft-mtp arm"] = med(
        lambda r: best(r, "ours", OURS[1:]) / best(r, "llama-server", fixed)
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.serving.versus_server")
    ap.add_argument("--server", required=True, help="path to a llama-server built from the vendored source")
    ap.add_argument("--model", type=Path, default=None, help="default: the bundled demo")
    ap.add_argument("--prompts", type=Path, default=PROMPTS)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    prompts = json.loads(a.prompts.read_text())
    try:
        res = run(a.server, a.model or demo_model_path(), prompts, a.tokens, a.rounds, a.threads, a.ctx)
    except ServerError as e:
        raise SystemExit(str(e)) from None
    if a.json:
        print(json.dumps(res))
        return 0
    names = list(res["rounds"][0])
    print("tok/s per round: " + ", ".join(names))
    for r in res["rounds"]:
        print("  " + "  ".join(f"{r[k]:8.1f}" for k in names))
    print(f"\n| ratio | median of {len(res['rounds'])} rounds |\n|---|---|")
    for k, v in res["ratios"].items():
        print(f"| {k} | {v:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
