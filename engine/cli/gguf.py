"""``mtp-studio inspect | validate | compose | split``: the GGUF toolkit on the command line.

Exit status: 0 valid / done, 1 invalid input, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from engine.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, die
from engine.errors import Cancelled, ComposeError, MtpStudioError


def register(sub) -> None:
    p = sub.add_parser(
        "inspect", help="summarize a GGUF model (or projector) from its headers, and whether it fits this machine"
    )
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true")
    p.add_argument("--ctx", type=int, default=4096, help="context size the memory estimate is for (default 4096)")
    p.set_defaults(func=run_inspect)

    p = sub.add_parser("validate", help="check a GGUF file, shard set or projector before anything loads it")
    p.add_argument("file", type=Path)
    p.add_argument("--probe", action="store_true", help="also load it with llama.cpp in a child process and draft")
    p.add_argument("--head", type=Path, help="an external MTP head to probe with the target")
    p.add_argument("--mmproj", type=Path, help="a multimodal projector (mmproj-*.gguf): check that it fits the model")
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

    p = sub.add_parser("split", help="split a GGUF file into a shard set, as llama-gguf-split does")
    p.add_argument("file", type=Path, help="GGUF file to split (not already a shard)")
    p.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="PREFIX",
        help="writes PREFIX-00001-of-0000N.gguf, … (a trailing .gguf is dropped)",
    )
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--shards", type=int, metavar="N", help="this many shards, the tensors shared out evenly")
    size.add_argument("--max-tensors", type=int, metavar="N", help="at most N tensors per shard")
    size.add_argument(
        "--max-size",
        type=parse_size,
        metavar="SIZE",
        help="at most SIZE of tensor data per shard, e.g. 500M or 4G (decimal; 4GiB: binary)",
    )
    p.add_argument("--force", action="store_true", help="replace existing shards of that name (never the input)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_split)


def run_inspect(args) -> int:
    from engine.gguf.inspect import format_summary, inspect_path
    from engine.gguf.projector import is_projector

    from engine.runtime.load.fit import fit_of_set
    from engine.gguf.shards import open_set

    if is_projector(args.file):
        return _inspect_projector(args)
    try:
        s = inspect_path(args.file)
        f = fit_of_set(
            open_set(args.file), args.ctx, mtp=s["mtp"]["kind"] == "integrated" and s["mtp"]["arch_supported"]
        )
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    s["memory"] = f.estimate.to_json()
    s["fit"] = f.to_json()
    print(json.dumps(s) if args.json else format_summary(s) + f"\nmemory        {f.line()}")
    return EXIT_OK


def _inspect_projector(args) -> int:
    from engine.gguf.inspect import format_projector, inspect_projector

    try:
        s = inspect_projector(args.file)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    print(json.dumps(s) if args.json else format_projector(s))
    return EXIT_OK


def _validate_projector(args) -> int:
    """``validate MMPROJ``: the file alone (its model is checked with ``validate MODEL --mmproj``)."""
    from engine.gguf.projector import validate_projector

    report, facts = validate_projector(args.file)
    if args.probe:
        report.warn("probe_not_run", "--probe loads text models; check this with validate MODEL --mmproj", args.file)
    _print_problems(args, report, facts)
    if report.valid and not args.json:
        print(f"valid: {args.file} ({_projector_line(facts)})")
    return EXIT_OK if report.valid else EXIT_INVALID


def _check_pair(args, report):
    """``--mmproj``: the projector's own checks and whether it fits the model; its facts."""
    from engine.gguf.projector import pair_problem, validate_projector

    preport, facts = validate_projector(args.mmproj)
    report.errors += preport.errors
    report.warnings += preport.warnings
    report.files += preport.files
    if facts is not None and report.valid:
        problem = pair_problem(args.file, args.mmproj)
        if problem:
            report.error("projector_mismatch", problem, str(args.mmproj))
    return facts


def _projector_line(facts) -> str:
    kinds = " + ".join(t for t in (facts.projector_type, facts.audio_projector_type) if t)
    return f"{kinds} projector reading {' and '.join(facts.modalities)}, {facts.output_width}-wide embeddings"


def _print_problems(args, report, projector) -> None:
    """The report as JSON (with the projector's facts), or its errors and warnings."""
    if args.json:
        out = report.to_json()
        if projector is not None:
            out["projector"] = projector.to_json()
        print(json.dumps(out))
        return
    for e in report.errors:
        print(f"error   [{e.code}] {e}")
    for w in report.warnings:
        print(f"warning [{w.code}] {w}")


def run_validate(args) -> int:
    from engine.gguf.projector import is_projector
    from engine.gguf.validate import validate_path
    from engine.runtime.load.filecheck import probe

    if is_projector(args.file):
        if args.mmproj is not None:
            return die(f"{args.file} is a projector: give the text model first, then --mmproj {args.file}", EXIT_USAGE)
        return _validate_projector(args)
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
    projector = _check_pair(args, report) if args.mmproj is not None else None
    _print_problems(args, report, projector)
    probe_info = report.mtp.get("probe")
    if report.valid and not args.json:
        kind = report.mtp.get("kind")
        print(f"valid: {args.file} ({report.mtp.get('architecture')}, MTP: {kind})")
        if probe_info and probe_info.get("acceptance") is not None:
            print(f"probe: loaded with MTP, draft acceptance {probe_info['acceptance']:.2f}")
        if projector is not None:
            print(f"projector: {args.mmproj} fits ({_projector_line(projector)})")
    return EXIT_OK if report.valid else EXIT_INVALID


def _progress(args, verb: str):
    """A throttled percentage on stderr (silent with --json)."""
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if not args.json and (now - last[0] > 0.5 or done == total):
            last[0] = now
            print(f"\r{verb}: {100 * done / max(total, 1):5.1f}%", end="", file=sys.stderr, flush=True)

    return progress


def _on_term(_sig, _frame) -> None:
    raise KeyboardInterrupt  # unwinds through compose/split, which remove their temp files


@contextmanager
def _term_interrupts():
    """SIGTERM cancels like Ctrl-C while the block runs."""
    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _failed(args, e: MtpStudioError) -> int:
    if args.json:
        print(json.dumps({"ok": False, "error": {"code": e.code, "message": str(e)}}))
    return die(str(e), EXIT_INVALID)


def run_compose(args) -> int:
    from engine.gguf.compose import compose

    try:
        with _term_interrupts():
            result = compose(
                args.target,
                args.head,
                args.out,
                set_kv=args.set_kv,
                overwrite=args.force,
                progress=_progress(args, "composing"),
            )
    except (KeyboardInterrupt, Cancelled):
        return die("cancelled; nothing was written", EXIT_INVALID)
    except MtpStudioError as e:
        return _failed(args, e)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(file=sys.stderr)
        for w in result.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(
            f"composed {len(result.outputs)} file(s): {result.block_count} blocks, {result.nextn_layers} NextN "
            f"layer(s), "
            f"{result.tensors_added} tensors added"
        )
        for o in result.outputs:
            print(f"  {o}")
    return EXIT_OK if result.validation.valid else EXIT_INVALID


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(i?)b?|b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``4G`` (10^9), ``4GiB`` (2^30), ``500M``, ``1.5G`` or plain bytes, as llama-gguf-split
    reads ``--split-max-size`` (decimal units) plus binary ones."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 500M, 4G or 4GiB")
    unit, binary = (m[2] or "").lower(), bool(m[3])
    n = int(float(m[1]) * (1024 if binary else 1000) ** " kmgt".index(unit or " "))
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than one byte")
    return n


def run_split(args) -> int:
    from engine.gguf.split import split_model
    from engine.gguf.validate import validate_path

    prefix = args.out.with_name(args.out.name.removesuffix(".gguf"))
    try:
        with _term_interrupts():
            outs = split_model(
                args.file,
                args.shards,
                prefix,
                max_tensors=args.max_tensors,
                max_bytes=args.max_size,
                overwrite=args.force,
                progress=_progress(args, "splitting"),
            )
    except (KeyboardInterrupt, Cancelled):
        return die("cancelled; nothing was written", EXIT_INVALID)
    except MtpStudioError as e:
        return _failed(args, e)
    report, _facts, _ms = validate_path(outs[0])
    if not report.valid:
        for o in outs:
            o.unlink(missing_ok=True)
        errors = "; ".join(str(e) for e in report.errors[:3])
        return _failed(
            args, ComposeError(f"The shards failed validation and were removed: {errors}", code="output_invalid")
        )
    if args.json:
        print(json.dumps({"ok": True, "outputs": [str(o) for o in outs], "validation": report.to_json()}))
    else:
        print("\rsplitting: 100.0%", file=sys.stderr)  # bytes written differ from the input size: finish the count
        print(f"split {args.file} into {len(outs)} shard(s):")
        for o in outs:
            print(f"  {o}")
    return EXIT_OK
