"""``mtp-studio bench memory``: the memory estimate against what a load really takes."""

from __future__ import annotations

import json
from pathlib import Path

from engine.cli import EXIT_INVALID, EXIT_OK, die


def register(bsub) -> None:
    p = bsub.add_parser(
        "memory",
        help="memory estimate vs measured peak memory per model and context (docs/models.md)",
        description="Loads each model at each context in a child process as the app does (one full prompt batch and "
        "a few decoded tokens) and prints the estimate (from the header alone), the measured peak resident memory "
        "less what the process held before the load, and llama.cpp's own buffer log.",
    )
    p.add_argument("models", nargs="+", type=Path)
    p.add_argument("--ctx", type=int, nargs="+", default=[4096, 32768], help="contexts to measure (default 4096 32768)")
    p.add_argument("--mtp", default="auto", choices=["off", "integrated", "auto"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"


def run(args) -> int:
    from engine.errors import MtpStudioError
    from engine.runtime.measure.memory import measure

    rows = []
    for model in args.models:
        for ctx in args.ctx:
            try:
                rows.append(measure(model, ctx, mtp=args.mtp))
            except MtpStudioError as e:
                return die(str(e), EXIT_INVALID)
            if not args.json:
                r = rows[-1]
                e = r.estimate
                log = r.logged
                print(
                    f"{r.model:<32} ctx {r.n_ctx:>7}  MTP {r.mtp:<10} estimate {_mib(e.total_bytes):>8} MiB  "
                    f"measured {_mib(r.measured_bytes):>8} MiB  error {100 * r.error:+.1f}%",
                    flush=True,
                )
                print(
                    f"    estimate: weights {_mib(e.weights_bytes)}, KV {_mib(e.kv_bytes)}, recurrent "
                    f"{_mib(e.recurrent_bytes)}, MTP {_mib(e.mtp_bytes)}, compute {_mib(e.compute_bytes)}; "
                    f"logits reserve not made: {_mib(e.saved_bytes)} MiB",
                    flush=True,
                )
                print("    llama.cpp log: " + ", ".join(f"{k} {_mib(v)}" for k, v in log.items()), flush=True)
    if args.json:
        print(json.dumps([r.to_json() for r in rows]))
    else:
        worst = max(abs(r.error) for r in rows)
        print(f"largest error: {100 * worst:.1f}% over {len(rows)} loads")
    return EXIT_OK
