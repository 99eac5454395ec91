"""Semantic checks that need llama.cpp itself, run in a child process.

A file that passes structural validation can still make llama.cpp abort (a failed
``GGML_ASSERT`` ends the process). The probe asks llama.cpp, in a child, to do the
work that could abort: a metadata-only load (``no_alloc``, as ``common/fit.cpp`` does:
catches shape, array, count and split errors in seconds) and, with ``full``, a real
load with ``load_mtp``, the MTP context, and a short draft run reporting acceptance.
The parent reports an abort with the child's last words instead of dying; the child
side is :mod:`engine.runtime.load.filecheck_child`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.childproc import run_child

CHILD_MODULE = "engine.runtime.load.filecheck_child"


@dataclass
class ProbeResult:
    """What the probe found; the child prints one of these per stage as JSON."""

    ok: bool
    stage: str = ""  # last stage reached: metadata | load | context | mtp_context | draft
    message: str = ""
    nextn_layers: int | None = None
    n_vocab: int | None = None
    n_embd: int | None = None
    acceptance: float | None = None
    drafted: int | None = None
    details: dict = field(default_factory=dict)


def probe(
    path: str | Path, *, head: str | Path | None = None, full: bool = False, timeout: float = 300.0
) -> ProbeResult:
    """Probe ``path`` (and an external ``head``) in a child process."""
    args = [str(path)]
    if head is not None:
        args += ["--head", str(head)]
    if full:
        args.append("--full")
    o = run_child(CHILD_MODULE, *args, timeout=timeout)
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
