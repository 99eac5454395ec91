"""``mtp-studio bench ...``: benchmark commands that print figures (not tests).

The A/B benchmark on the user's own model (``bench --model M``, the Performance page's too)
and ``bench make-model`` are the product's; every other sub-command is a thin entry into the
source checkout's benchmarks harness (:mod:`engine.cli.benchharness`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.cli import benchharness
from engine.cli.generate import add_rpc_args, rpc_options


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmarks: A/B speculation (--model), make-model, compose",
        description="Without a sub-command: interleaved A/B runs of plain greedy against MTP depths.",
    )
    _register_ab(p)
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCH")
    _register_make_model(bsub)
    benchharness.register(bsub)


def _register_make_model(bsub) -> None:
    m = bsub.add_parser("make-model", help="generate a qwen35 benchmark model with a chosen draft acceptance")
    m.add_argument("--size-mb", type=float, default=200)
    m.add_argument("--acceptance", type=float, required=True, help="per-draft acceptance, 0..1")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--head-out", type=Path, help="also write the trunk and a separate MTP head file")
    m.add_argument("--seed", type=int, default=7)
    m.add_argument("--dtype", choices=["f16", "q8_0", "q4_0"], default="f16", help="weight type (default f16)")
    m.set_defaults(func=_make_model)


def _make_model(args) -> int:
    from engine.cli import EXIT_USAGE, die
    from engine.gguf.inspect import human_size
    from engine.synth.benchmodel import make_bench_model

    if not 0 <= args.acceptance <= 1:
        return die("--acceptance must be between 0 and 1", EXIT_USAGE)
    built = make_bench_model(
        args.size_mb, args.acceptance, args.out, head_out=args.head_out, seed=args.seed, dtype=args.dtype
    )
    print(f"wrote {built.integrated} ({human_size(built.integrated.stat().st_size)})")
    if built.head is not None:
        print(f"wrote {built.trunk} and {built.head}")
    return 0


def _register_ab(p) -> None:
    p.add_argument("--model", type=Path, help="target GGUF (run the A/B benchmark)")
    p.add_argument("--head", type=Path, help="separate MTP head GGUF")
    p.add_argument("--depths", default="0,1,2,3,auto", help="arms: depths and/or 'auto' (default 0,1,2,3,auto)")
    p.add_argument("--prompts", type=Path, help="file with one prompt per line (or a JSON list)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=3, help="measured runs per arm (plus one warm-up)")
    p.add_argument("--max-depth", type=int, default=8, help="deepest draft auto may use (default 8)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--exact", action="store_true", help="exact mode (batch-invariant arithmetic)")
    add_rpc_args(p)
    p.add_argument("--temperature", type=float, default=0.0, help="sample every arm at this temperature (0: greedy)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument(
        "--sampled-draft", action="store_true", help="while sampling, sample the drafts (rejection sampling)"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--plot", type=Path, help="write a PNG: tokens/s by arm, acceptance by draft position")
    p.add_argument(
        "--profile",
        action="store_true",
        help="split each arm's time per token into llama.cpp calls, row reads, sampling and Python",
    )
    p.set_defaults(func=_ab)


def _read_prompts(path: Path | None) -> list[str]:
    import json

    from engine.runtime.measure.bench import DEFAULT_PROMPTS

    if path is None:
        return list(DEFAULT_PROMPTS)
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        prompts = json.loads(text)
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise ValueError("a JSON prompts file must hold a list of strings")
        return prompts
    return [line for line in text.splitlines() if line.strip()]


def _ab(args) -> int:
    import json

    from engine.cli import EXIT_INVALID, EXIT_USAGE, die
    from engine.errors import MtpStudioError
    from engine.runtime import jobs as J
    from engine.runtime.measure.bench import bench_job, parse_depths
    from engine.runtime.engine import Engine
    from engine.runtime.load.loader import LoadSpec, MtpSource

    if args.model is None:
        return die("bench needs --model (or a sub-command: make-model, compose)", EXIT_USAGE)
    try:
        arms = parse_depths(args.depths)
        prompts = _read_prompts(args.prompts)
        rpc, split = rpc_options(args)
    except (MtpStudioError, OSError, ValueError) as e:
        return die(str(e), EXIT_USAGE)
    deepest = max([int(a) for a in arms if a.isdigit()] + [args.max_depth if "auto" in arms else 1])
    if args.exact:
        from engine.runtime.llama import exact

        exact.request()
    spec = LoadSpec(
        args.model,
        head=args.head,
        mtp=MtpSource.AUTO,
        n_ctx=args.ctx,
        max_draft_depth=deepest,
        n_threads=args.threads,
        exact=args.exact,
        rpc=rpc,
        tensor_split=split,
    )
    with Engine() as engine:
        try:
            engine.submit(J.LoadModel(spec)).result()
            from engine.runtime import limits
            from engine.runtime.decode.sampling import SamplingParams

            sampling = SamplingParams(
                limits.check_temperature(args.temperature),
                limits.check_top_p(args.top_p),
                limits.check_top_k(args.top_k),
            )
            job = bench_job(
                arms,
                prompts,
                args.max_tokens,
                args.runs,
                sampling=sampling,
                sampled_draft=args.sampled_draft,
                profile=args.profile,
            )
            handle = engine.submit(J.Call(job, "bench"))
            for ev in handle.events():
                if isinstance(ev, J.Progress) and not args.json:
                    print(f"\r{ev.fraction * 100:5.1f}%  {ev.message:<30}", end="", file=sys.stderr, flush=True)
            result = handle.result()
        except MtpStudioError as e:
            return die(str(e), EXIT_INVALID)
    if not args.json:
        print(file=sys.stderr)
    body = result.to_json()
    if args.plot is not None:
        from engine.runtime.measure.benchplot import plot

        plot(body, args.plot)
    if args.json:
        print(json.dumps(body))
    else:
        print(
            f"{'depth':>6} {'tok/s':>9} {'min':>8} {'max':>8} {'speedup':>8} {'accept':>7} {'mean len':>9}  identical"
        )
        for a in body["arms"]:
            print(
                f"{a['depth']:>6} {a['tokens_per_second_median']:9.1f} {a['tokens_per_second_min']:8.1f} "
                f"{a['tokens_per_second_max']:8.1f} {a['speedup']:7.2f}x {a['acceptance']:7.2f} "
                f"{a['mean_accept_len']:9.2f}  {_identical(body, a)}"
            )
            if a["depth"] == "auto" and a["depth_choices"]:
                print(
                    "       auto chose depths (rounds): "
                    + ", ".join(f"{k}: {v}" for k, v in a["depth_choices"].items())
                )
    if body.get("verdict") and not args.json:
        print(f"\n{body['verdict']}")
    elif not args.json:
        for a in body["arms"]:
            if a["costs"] and a["speedup"] < 1.0:
                print(f"       loses: {a['costs']}")
    if args.profile and not args.json:
        print_profile(body)
    if body.get("temperature") and not args.json:
        mode = "sampled drafts (rejection sampling)" if body["sampled_draft"] else "argmax drafts, sample-and-compare"
        print(f"sampling at temperature {body['temperature']:g}: {mode}")
        for a in body["arms"]:
            if a["acceptance_by_position"]:
                pos = ", ".join(f"{x:.2f}" for x in a["acceptance_by_position"])
                print(f"       depth {a['depth']}: acceptance by draft position {pos}")
    if body["identical"] is False:
        for a in body["arms"]:
            for m in a["mismatches"]:
                print(f"mtp-studio: depth {a['depth']}: {m}", file=sys.stderr)
        return EXIT_INVALID
    return 0


def print_profile(body: dict) -> None:
    """The --profile table: ms per token by part, per arm."""
    from engine.runtime.measure.profile import PARTS

    print(f"\nwhere the time goes, ms per generated token ({'arms: ' + ', '.join(a['depth'] for a in body['arms'])}):")
    print(f"{'part':<26}" + "".join(f"{a['depth']:>9}" for a in body["arms"]))
    for part in PARTS:
        print(f"{part:<26}" + "".join(f"{a['profile']['ms_per_token'][part]:9.3f}" for a in body["arms"]))
    print(f"{'total':<26}" + "".join(f"{sum(a['profile']['ms_per_token'].values()):9.3f}" for a in body["arms"]))
    print(f"{'ms per round':<26}" + "".join(f"{a['profile']['ms_per_round']:9.3f}" for a in body["arms"]))
    print(f"{'tokens per round':<26}" + "".join(f"{a['profile']['tokens_per_round']:9.2f}" for a in body["arms"]))


def _identical(body: dict, arm: dict) -> str:
    if body.get("sampled_draft"):
        return "n/a (equal in distribution)"
    return "yes" if arm["identical"] else "NO"
