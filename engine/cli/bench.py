"""``mtp-studio bench ...``: benchmark commands that print figures (not tests)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks (A/B speculation, model generator, compose)")
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCH")

    c = bsub.add_parser("compose", help="compose time vs cp, peak RSS, 262k-vocab header parse time")
    c.add_argument("--size-gb", type=float, default=4.0, help="size of the generated target (default 4)")
    c.add_argument("--dir", type=Path, default=None, help="folder on the disk to test (default: temp dir)")
    c.add_argument("--runs", type=int, default=3)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=lambda a: _compose(a))


def _compose(args) -> int:
    from engine.gguf.bench import run

    return run(args.size_gb, args.dir, args.runs, args.json)
