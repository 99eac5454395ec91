"""``mtp-studio bench slots``: N concurrent clients on this app's endpoint (MTP auto, off and
fixed depths, with the model's slots) and on llama-server (with and without draft-mtp),
in alternating rounds: aggregate tok/s and what each client sees."""

from __future__ import annotations

from pathlib import Path


def register(bsub) -> None:
    p = bsub.add_parser(
        "slots",
        help="concurrent clients: aggregate tok/s and per-client time per token, ours vs llama-server",
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
    p.set_defaults(func=run)


def add_llama_server_args(p) -> None:
    """The options of a benchmark that also measures llama-server (bench slots, bench agent)."""
    p.add_argument(
        "--llama-server",
        default=None,
        metavar="PATH",
        help="llama-server binary (built from the vendored llama.cpp); default: on PATH, else skipped",
    )
    p.add_argument("--llama-mtp-depth", type=int, default=3, help="llama-server's --spec-draft-n-max (default 3)")


def run(args) -> int:
    import json

    from engine.cli import EXIT_INVALID, EXIT_USAGE, die
    from engine.runtime.llama.lib import default_threads
    from engine.runtime.measure import slots as S

    try:
        clients = [int(x) for x in args.clients.split(",") if x.strip()]
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        for a in arms:
            if a not in ("auto", "off") and not a.isdigit():
                raise ValueError(f"unknown arm {a!r}")
    except ValueError as e:
        return die(f"--clients / --arms: {e}", EXIT_USAGE)
    binary = S.find_llama_server(args.llama_server)
    threads = default_threads()
    servers: dict[str, S.ServerProcess] = {}
    results: dict[str, dict[int, list]] = {}
    try:
        ours = servers["ours"] = S.ServerProcess.ours(args.model, args.parallel, args.ctx)
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
                servers[name] = S.ServerProcess.llama_server(binary, args.model, common + extra_args, threads)
                targets[name] = (servers[name].url, "bench", {})
        for name, (url, model, extra) in targets.items():  # warm-up
            S.measure(url, model, 1, 16, extra)
        for r in range(args.rounds):
            for n in clients:
                for name, (url, model, extra) in targets.items():
                    run = S.measure(url, model, n, args.tokens, extra, opening=f"Round {r + 1}. ")
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
        "arms": {name: {str(n): S.summarise(runs) for n, runs in per.items()} for name, per in results.items()},
    }
    ours = {name: per for name, per in results.items() if name.startswith("ours ")}
    if "ours auto" in ours and len(ours) > 1:
        body["auto_vs_worst_paired"] = {str(n): r for n, r in S.paired(ours, "ours auto").items()}
    if args.json:
        print(json.dumps(body))
        return 0
    print(
        f"{body['model']}: {args.tokens}-token greedy completions, {body['parallel']} slots, medians of "
        f"{args.rounds} rounds (aggregate tok/s; per-client ms/token p50/p95)"
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
    if not binary:
        print("llama-server: not found (pass --llama-server PATH); its arms were skipped")
    return 0
