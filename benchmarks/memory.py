"""Estimated against measured memory: ``mtp-studio bench memory``.

Each (model, context) is loaded in a child process (:mod:`.memory_child`) exactly as the
app loads it, prefilled with one full batch and decoded a few tokens. Measured is the
child's peak resident memory less what it held before the load (Python and the
libraries); llama.cpp's own buffer log is reported beside it, part by part. The estimate
is :func:`engine.gguf.memory.estimate` on the file's header.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.childproc import run_child
from engine.errors import MtpStudioError
from engine.gguf.memory import MemoryEstimate, ModelShape, estimate
from engine.gguf.shards import open_set


@dataclass
class MemoryRow:
    model: str
    n_ctx: int
    mtp: str
    estimate: MemoryEstimate
    measured_bytes: int  # peak RSS less the RSS before the load
    logged: dict[str, int]  # llama.cpp's buffer log, by part

    @property
    def error(self) -> float:
        """(estimate - measured) / measured."""
        return self.estimate.total_bytes / self.measured_bytes - 1.0

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "n_ctx": self.n_ctx,
            "mtp": self.mtp,
            "estimate": self.estimate.to_json(),
            "measured_bytes": self.measured_bytes,
            "llama_cpp_buffers": self.logged,
            "error": round(self.error, 4),
        }


def measure(path: str | Path, n_ctx: int, *, mtp: str = "auto", depth: int = 4, timeout: float = 600) -> MemoryRow:
    shape = ModelShape.of_set(open_set(path))
    out = run_child(
        "engine.runtime.measure.memory_child",
        str(path),
        "--ctx",
        str(n_ctx),
        "--mtp",
        mtp,
        "--depth",
        str(depth),
        timeout=timeout,
    )
    if out.returncode != 0 or "peak_rss" not in out.last:
        raise MtpStudioError(
            f"measuring {Path(path).name} at context {n_ctx} failed ({out.signal_name}): " + " ".join(out.stderr_tail)
        )
    used_mtp = out.last["mtp"] != "off"
    est = estimate(shape, n_ctx, mtp=used_mtp, depth=depth)
    return MemoryRow(
        Path(path).name,
        out.last["n_ctx"],
        out.last["mtp"],
        est,
        out.last["peak_rss"] - out.last["rss_before"],
        out.last["buffers"],
    )
