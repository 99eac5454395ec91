"""``mtp-studio inspect | validate | compose``: the GGUF toolkit on the command line.

Exit status: 0 valid / done, 1 invalid input, 2 usage error.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

from engine.cli import EXIT_INVALID, EXIT_OK, die
from engine.errors import Cancelled, MtpStudioError


def register(sub) -> None:
    p = sub.add_parser("inspect", help="summarize a GGUF model from its headers")
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_inspect)

    p = sub.add_parser("validate", help="check a GGUF file or shard set before anything loads it")
    p.add_argument("file", type=Path)
    p.add_argument("--probe", action="store_true", help="also load it with llama.cpp in a child process and draft")
    p.add_argument("--head", type=Path, help="an external MTP head to probe with the target")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_validate)

    p = sub.add_parser("compose", help="compose a target model and a separate MTP head into one GGUF set")
    p.add_argument("--target", required=True, type=Path, help="target GGUF (shard 1 of a set)")
    p.add_argument("--head", required=True, type=Path, help="MTP head GGUF (mtp-*.gguf)")
    p.add_argument("--out", required=True, type=Path, help="output file (first shard name for a sharded target)")
    p.add_argument("--set-kv", action="append", default=[], metavar="KEY=TYPE:VALUE", help="override metadata")
    p.add_argument("--force", action="store_true", help="replace an existing output (never an input)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_compose)


def run_inspect(args) -> int:
    from engine.gguf.inspect import format_summary, inspect_path

    try:
        s = inspect_path(args.file)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    print(json.dumps(s) if args.json else format_summary(s))
    return EXIT_OK


def run_validate(args) -> int:
    from engine.gguf.validate import validate_path
    from engine.runtime.load.filecheck import probe

    report, facts, ms = validate_path(args.file)
    if report.valid and args.probe:
        r = probe(args.file, head=args.head, full=True)
        report.mtp["probe"] = {
            "ok": r.ok,
            "stage": r.stage,
            "acceptance": r.acceptance,
            "drafted": r.drafted,
            "message": r.message,
        }
        if not r.ok:
            report.error("probe_failed", f"llama.cpp rejected it at stage {r.stage!r}: {r.message}", str(args.file))
        elif r.drafted and not r.acceptance:
            report.warn("zero_acceptance", "the MTP head loads but none of its drafts were accepted", str(args.file))
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        for e in report.errors:
            print(f"error   [{e.code}] {e}")
        for w in report.warnings:
            print(f"warning [{w.code}] {w}")
        probe_info = report.mtp.get("probe")
        if report.valid:
            kind = report.mtp.get("kind")
            print(f"valid: {args.file} ({report.mtp.get('architecture')}, MTP: {kind})")
            if probe_info and probe_info.get("acceptance") is not None:
                print(f"probe: loaded with MTP, draft acceptance {probe_info['acceptance']:.2f}")
    return EXIT_OK if report.valid else EXIT_INVALID


def run_compose(args) -> int:
    from engine.gguf.compose import compose

    cancel = threading.Event()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if not args.json and (now - last[0] > 0.5 or done == total):
            last[0] = now
            print(f"\rcomposing: {100 * done / max(total, 1):5.1f}%", end="", file=sys.stderr, flush=True)

    def on_term(_sig, _frame) -> None:
        raise KeyboardInterrupt  # unwinds through compose, which removes its temp files

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        result = compose(args.target, args.head, args.out, set_kv=args.set_kv, overwrite=args.force, progress=progress)
    except KeyboardInterrupt:
        cancel.set()
        return die("cancelled; nothing was written", EXIT_INVALID)
    except Cancelled:
        return die("cancelled; nothing was written", EXIT_INVALID)
    except MtpStudioError as e:
        if args.json:
            print(json.dumps({"ok": False, "error": {"code": e.code, "message": str(e)}}))
        return die(str(e), EXIT_INVALID)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(file=sys.stderr)
        for w in result.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(
            f"composed {len(result.outputs)} file(s): {result.block_count} blocks, {result.nextn_layers} NextN layer(s), "
            f"{result.tensors_added} tensors added"
        )
        for o in result.outputs:
            print(f"  {o}")
    return EXIT_OK if result.validation.valid else EXIT_INVALID


