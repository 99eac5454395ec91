"""Semantic checks that need llama.cpp itself, run in a child process.

A file that passes structural validation can still make llama.cpp abort (a failed
``GGML_ASSERT`` ends the process). The probe asks llama.cpp, in a child, to do the
work that could abort: a metadata-only load (``no_alloc``, as ``common/fit.cpp`` does:
catches shape, array, count and split errors in seconds) and, with ``full``, a real
load with ``load_mtp``, the MTP context, and a short draft run reporting acceptance.
The parent reports an abort with the child's last words instead of dying.

Run as a module: ``python -m engine.gguf.probe PATH [--head PATH] [--full]``; it prints
one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.childproc import child_env, module_command

PROBE_VERSION = 1


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
    cmd = module_command("engine.gguf.probe", *args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env())
    except subprocess.TimeoutExpired:
        return ProbeResult(False, "timeout", f"llama.cpp did not finish probing within {timeout:.0f} s")
    out = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and out:
        try:
            return ProbeResult(**json.loads(out[-1]))
        except (TypeError, ValueError):
            pass
    tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-3:]
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = str(-proc.returncode)
        msg = f"llama.cpp aborted ({sig}) while checking this file"
    else:
        msg = f"the probe exited with status {proc.returncode}"
    if tail:
        msg += ": " + " | ".join(tail)
    stage = ""
    if out:
        try:
            stage = json.loads(out[-1]).get("stage", "")
        except ValueError:
            pass
    return ProbeResult(False, stage or "crash", msg)


# ------------------------------------------------------------------ probe cache
def _cache_file() -> Path:
    from engine.paths import cache_dir

    return cache_dir() / "probe-cache.json"


def _key(path: Path, head: Path | None) -> str:
    parts = [str(PROBE_VERSION)]
    for p in (path, head):
        if p is None:
            parts.append("-")
            continue
        st = p.stat()
        parts += [str(p.resolve()), str(st.st_size), str(st.st_mtime_ns)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached_probe(path: str | Path, *, head: str | Path | None = None) -> ProbeResult:
    """Metadata probe, remembered per file identity (path, size, mtime)."""
    p, h = Path(path), (Path(head) if head is not None else None)
    key = _key(p, h)
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return ProbeResult(**cache[key])
    result = probe(p, head=h)
    if result.ok:
        cache[key] = asdict(result)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(cache_path)
    return result


# ----------------------------------------------------------------------- child
def _emit(result: ProbeResult) -> None:
    sys.stdout.write(json.dumps(asdict(result)) + "\n")
    sys.stdout.flush()


def _child(path: str, head: str | None, full: bool) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    from engine.gguf.validate import validate_path

    report, facts, _ = validate_path(path)
    if not report.valid:
        _emit(ProbeResult(False, "validate", "; ".join(str(e) for e in report.errors[:3])))
        return 0
    from engine.errors import MtpStudioError
    from engine.runtime.model import Model

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
    from engine.errors import MtpStudioError
    from engine.runtime.loader import LoadSpec, MtpSource, load

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
        from engine.runtime.decoder import DecodeParams, FixedDepth, generate

        prompt = lm.model.prompt_tokens("The quick brown fox jumps over the lazy dog. " * 3)
        g = generate(lm.session, prompt, DecodeParams(max_tokens=32, depth=FixedDepth(1), ignore_eog=True))
        res.acceptance = g.stats.acceptance
        res.drafted = g.stats.drafted
        if g.stats.drafted and g.stats.accepted == 0:
            res.details["warning"] = "the MTP head drafted but none of its drafts were accepted"
    finally:
        lm.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.gguf.probe")
    ap.add_argument("path")
    ap.add_argument("--head")
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args(argv)
    return _child(a.path, a.head, a.full)


if __name__ == "__main__":
    raise SystemExit(main())
