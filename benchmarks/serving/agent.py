"""``mtp-studio bench agent``: agent workloads (an edit, a quote, a JSON echo, new code)
under plain decoding, MTP auto, suffix drafts and both, against llama-server's draft-mtp
and ngram-mod; a long prompt's time with and without MTP; auto's first tokens from a
fresh start (the measurements: :mod:`benchmarks.serving.agent_workloads`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.serving import agent_workloads as A
from benchmarks.serving.servers import ServerProcess, add_llama_server_args, find_llama_server
from engine.cli import EXIT_INVALID, EXIT_USAGE, die
from engine.runtime.llama.lib import default_threads
from engine.runtime.load.loader import LoadSpec, MtpSource, load

PARTS = ("workloads", "prompt", "cold")


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Replays agent requests with the model's chat template (an edit of a file the prompt holds, a "
        "summary quoting a tool result, a JSON record echoed with one change, new code) under each arm in "
        "alternating rounds; times an N-token prompt with MTP off, with the head's prompt window and feeding it "
        "every position; and runs auto from a fresh start over its first tokens beside plain and fixed depths.",
    )
    p.add_argument("--model", type=Path, required=True)
    p.add_argument(
        "--parts", default="workloads", help=f"which parts, comma-separated: {', '.join(PARTS)} (default workloads)"
    )
    p.add_argument("--workloads", default="edit,quote,json,new")
    p.add_argument(
        "--arms", default=None, help="our arms (default: plain,auto,suffix,both; plain,suffix without a head)"
    )
    p.add_argument(
        "--lines", type=int, default=60, help="lines of the file / tool result the prompt holds (default 60)"
    )
    p.add_argument("--tokens", type=int, default=400, help="most tokens per answer (default 400)")
    p.add_argument("--rounds", type=int, default=2, help="measured rounds per arm, after a warm-up (default 2)")
    p.add_argument(
        "--planted",
        action="store_true",
        help="put the model's own answer in the prompt (for bench models, whose answer ignores the prompt)",
    )
    p.add_argument("--prompt-tokens", type=int, default=20000, help="the long prompt's length (part 'prompt')")
    p.add_argument("--sessions", type=int, default=5, help="fresh starts of auto (part 'cold')")
    p.add_argument("--cold-tokens", type=int, default=1000, help="tokens per fresh start (part 'cold')")
    p.add_argument("--ctx", type=int, default=8192)
    add_llama_server_args(p)
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.serving.agent") -> int:
    args = parser(prog).parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    names = [x.strip() for x in args.workloads.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS] + [x for x in names if x not in A.WORKLOADS]
    if bad:
        return die(f"unknown part or workload: {', '.join(bad)}", EXIT_USAGE)
    ctx = max(args.ctx, args.prompt_tokens + args.tokens + 16) if "prompt" in parts else args.ctx
    try:
        lm = load(LoadSpec(args.model, mtp=MtpSource.AUTO, n_ctx=ctx, probe=True))
    except Exception as e:  # noqa: BLE001 - a load error is the user's to read
        return die(f"bench agent: {e}", EXIT_INVALID)
    has_head = lm.session.draft is not None
    arms = [a.strip() for a in (args.arms or ("plain,auto,suffix,both" if has_head else "plain,suffix")).split(",")]
    if [a for a in arms if a not in A.ARMS]:
        return die(f"--arms: choose from {', '.join(A.ARMS)}", EXIT_USAGE)
    body: dict = {
        "model": args.model.name,
        "mtp": has_head,
        "threads": default_threads(),
        "text": A.source_text_digest(),
    }
    servers: dict[str, ServerProcess] = {}
    try:
        if "workloads" in parts:
            binary = find_llama_server(args.llama_server)
            if binary:
                for name, extra in A.llama_server_arms(has_head, args.llama_mtp_depth).items():
                    servers[name] = ServerProcess.llama_server(
                        binary, args.model, ["-c", str(ctx), "--cache-ram", "0", *extra], default_threads()
                    )
            body["llama_server"] = binary
            body["workloads"] = A.workloads(
                lm,
                names,
                arms,
                lines=args.lines,
                max_tokens=args.tokens,
                rounds=args.rounds,
                planted=args.planted,
                servers={n: s.url for n, s in servers.items()},
            )
        if "prompt" in parts and has_head:
            body["prompt"] = A.prompt_cost(lm, args.prompt_tokens, rounds=args.rounds, max_tokens=min(args.tokens, 256))
        if "cold" in parts and has_head:
            body["cold"] = A.cold_start(lm, sessions=args.sessions, tokens=args.cold_tokens, lines=args.lines)
    except (RuntimeError, OSError, ValueError) as e:
        return die(f"bench agent: {e}", EXIT_INVALID)
    finally:
        for s in servers.values():
            s.stop()
        lm.close()
    if args.json:
        print(json.dumps(body))
        return 0
    _print(body, args)
    return 0


def _print(body: dict, args) -> None:
    print(f"{body['model']} ({'MTP head' if body['mtp'] else 'no MTP head'}), {body['threads']} threads")
    for name, w in body.get("workloads", {}).items():
        same = "yes" if w["identical"] else "NO (llama.cpp's batch noise outside exact mode: docs/mtp.md)"
        print(f"\n{name}: {w['prompt_tokens']}-token prompt, ours identical across arms: {same}")
        print(f"  {'arm':<34}{'tokens':>7}{'tok/s':>9}{'tok/fwd':>9}   rounds")
        for arm, a in w["arms"].items():
            same = f"   first {a['same_prefix']} tokens as ours" if "same_prefix" in a else ""
            print(
                f"  {arm:<34}{a['tokens']:>7}{a['tokens_per_second']:>9.1f}{a['tokens_per_forward']:>9.2f}   "
                f"{a['tokens_per_second_all']}{same}"
            )
    if "workloads" in body and not body.get("llama_server"):
        print("llama-server: not found (pass --llama-server PATH); its arms were skipped")
    pc = body.get("prompt")
    if pc:
        print(
            f"\n{pc['prompt_tokens']}-token prompt (then {pc['generated']} tokens at depth {pc['depth']}); "
            f"output identical: {'yes' if pc['identical'] else 'NO'}"
        )
        for arm, a in pc["arms"].items():
            acc = "" if a["acceptance"] is None else f", acceptance after {a['acceptance']:.3f}"
            print(f"  {arm:<26}{a['prompt_ms']:>9.0f} ms  {a['vs_off']:.3f}x off{acc}   {a['prompt_ms_all']}")
    cold = body.get("cold")
    if cold:
        print(
            f"\nauto from a fresh start, first {cold['tokens']} tokens, {cold['sessions']} sessions (tok/s per session)"
        )
        for arm, v in cold["tokens_per_second"].items():
            print(f"  {arm:<8}{v}")
        print(f"  auto / plain: {cold['auto_vs_plain']}")
        print(f"  auto / best fixed (depth {cold['best_fixed']}): {cold['auto_vs_best_fixed']}")


if __name__ == "__main__":
    raise SystemExit(main())
