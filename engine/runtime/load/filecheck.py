"""Semantic checks that need llama.cpp itself, run in a child process.

A file that passes structural validation can still make llama.cpp abort (a failed
``GGML_ASSERT`` ends the process). The probe asks llama.cpp, in a child, to do the
work that could abort: a metadata-only load (``no_alloc``, as ``common/fit.cpp`` does:
catches shape, array, count and split errors in seconds) and, with ``full``, a real
load with ``load_mtp``, the MTP context, and a short draft run reporting acceptance.
The parent reports an abort with the child's last words instead of dying.

Run as a module: ``python -m engine.runtime.load.filecheck PATH [--head PATH] [--full]``; it prints
one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.childproc import run_child
from engine.errors import MtpStudioError
from engine.gguf.validate import validate_path
from engine.runtime.decode.loop import DecodeParams, FixedDepth, generate
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.runtime.llama.model import Model


@dataclass
class ProbeResult:
    ok: bool
    stage: str = ""  # last stage reached: metadata | load | context | mtp_context | draft
    message: str = ""
    nextn_layers: int | None = None
    n_vocab: int | None = None
    n_embd: int | None = None
    acceptance: float | None = None
    drafted: int | None = None
    details: dict = field(default_factory=dict)


def probe(path: str | Path, *, head: str | Path | None = None, full: bool = False, timeout: float = 300.0) -> ProbeResult:
    """Probe ``path`` (and an external ``head``) in a child process."""
    args = [str(path)]
    if head is not None:
        args += ["--head", str(head)]
    if full:
        args.append("--full")
    o = run_child("engine.runtime.load.filecheck", *args, timeout=timeout)
    if o.timed_out:
        return ProbeResult(False, "timeout", f"llama.cpp did not finish probing within {timeout:.0f} s")
    if o.returncode == 0 and o.last:
        try:
            return ProbeResult(**o.last)
        except TypeError:
            pass
    if o.crashed:
        msg = f"llama.cpp aborted ({o.signal_name}) while checking this file"
    else:
        msg = f"the probe exited with {o.signal_name}"
    if o.stderr_tail:
        msg += ": " + " | ".join(o.stderr_tail)
    return ProbeResult(False, o.last.get("stage") or "crash", msg)


# ----------------------------------------------------------------------- child
def _emit(result: ProbeResult) -> None:
    sys.stdout.write(json.dumps(asdict(result)) + "\n")
    sys.stdout.flush()


def _child(path: str, head: str | None, full: bool) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")

    report, facts, _ = validate_path(path)
    if not report.valid:
        _emit(ProbeResult(False, "validate", "; ".join(str(e) for e in report.errors[:3])))
        return 0

    res = ProbeResult(False, "metadata")
    want_mtp = facts.nextn_layers > 0
    # Print progress so an abort leaves the last stage on stdout.
    _emit(res)
    try:
        m = Model.load(path, load_mtp=want_mtp, metadata_only=True, n_gpu_layers=0)
    except MtpStudioError as e:
        res.message = str(e)
        _emit(res)
        return 0
    res.nextn_layers, res.n_vocab, res.n_embd = m.n_layer_nextn, m.n_vocab, m.n_embd
    m.close()
    if head is not None:
        res.stage = "metadata_head"
        _emit(res)
        try:
            Model.load(head, load_mtp=True, metadata_only=True, n_gpu_layers=0).close()
        except MtpStudioError as e:
            res.message = f"head: {e}"
            _emit(res)
            return 0
    if full and facts.kind == "head-only":
        res.details["note"] = "an MTP head only: drafting needs its target (validate the target with --head)"
    elif full:
        _full_probe(path, head, want_mtp, res)
        if not res.ok and res.message:
            _emit(res)
            return 0
    res.ok = True
    res.stage = "done"
    _emit(res)
    return 0


def _full_probe(path: str, head: str | None, want_mtp: bool, res: ProbeResult) -> None:

    res.stage = "load"
    _emit(res)
    source = MtpSource.EXTERNAL if head else (MtpSource.INTEGRATED if want_mtp else MtpSource.OFF)
    try:
        lm = load(LoadSpec(path, head=head, mtp=source, n_ctx=512, probe=False))
    except MtpStudioError as e:
        res.message = str(e)
        return
    try:
        if lm.session.draft is None:
            res.details["mtp"] = "none"
            return
        res.stage = "draft"
        _emit(res)

        prompt = lm.model.prompt_tokens("The quick brown fox jumps over the lazy dog. " * 3)
        g = generate(lm.session, prompt, DecodeParams(max_tokens=32, depth=FixedDepth(1), ignore_eog=True))
        res.acceptance = g.stats.acceptance
        res.drafted = g.stats.drafted
        if g.stats.drafted and g.stats.accepted == 0:
            res.details["warning"] = "the MTP head drafted but none of its drafts were accepted"
    finally:
        lm.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.runtime.load.filecheck")
    ap.add_argument("path")
    ap.add_argument("--head")
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args(argv)
    return _child(a.path, a.head, a.full)


if __name__ == "__main__":
    raise SystemExit(main())
