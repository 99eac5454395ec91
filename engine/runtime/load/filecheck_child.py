"""The child side of :mod:`engine.runtime.load.filecheck`: ask llama.cpp about a file
(a metadata-only load; with ``--full`` a real load with MTP and a short draft run) and
print a :class:`~engine.runtime.load.filecheck.ProbeResult` as one JSON line per stage,
so an abort leaves the stage it died in on stdout.

``python -m engine.runtime.load.filecheck_child PATH [--head PATH] [--full]``
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict

from engine.errors import MtpStudioError
from engine.gguf.validate import validate_path
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.llama.model import Model
from engine.runtime.load.filecheck import ProbeResult
from engine.runtime.load.loader import LoadSpec, MtpSource, load


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
    ap = argparse.ArgumentParser(prog="engine.runtime.load.filecheck_child")
    ap.add_argument("path")
    ap.add_argument("--head")
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args(argv)
    return _child(a.path, a.head, a.full)


if __name__ == "__main__":
    raise SystemExit(main())
