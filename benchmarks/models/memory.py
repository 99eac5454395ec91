"""Estimated against measured memory: ``mtp-studio bench memory``.

Each (model, context) is loaded in a child process (:mod:`benchmarks.models.memory_child`) exactly as the
app loads it, prefilled with one full batch and decoded a few tokens. Measured is the
child's peak resident memory less what it held before the load (Python and the
libraries); llama.cpp's own buffer log is reported beside it, part by part. The estimate
is :func:`engine.gguf.memory.estimate` on the file's header.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks import child_env
from engine.childproc import run_child
from engine.cli import EXIT_INVALID, EXIT_OK, die
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
        "benchmarks.models.memory_child",
        str(path),
        "--ctx",
        str(n_ctx),
        "--mtp",
        mtp,
        "--depth",
        str(depth),
        timeout=timeout,
        env=child_env(),
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


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Loads each model at each context in a child process as the app does (one full prompt batch and "
        "a few decoded tokens) and prints the estimate (from the header alone), the measured peak resident memory "
        "less what the process held before the load, and llama.cpp's own buffer log.",
    )
    p.add_argument("models", nargs="+", type=Path)
    p.add_argument("--ctx", type=int, nargs="+", default=[4096, 32768], help="contexts to measure (default 4096 32768)")
    p.add_argument("--mtp", default="auto", choices=["off", "integrated", "auto"])
    p.add_argument("--json", action="store_true")
    return p


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"


def main(argv: list[str] | None = None, prog: str = "benchmarks.models.memory") -> int:
    args = parser(prog).parse_args(argv)
    rows = []
    for model in args.models:
        for ctx in args.ctx:
            try:
                rows.append(measure(model, ctx, mtp=args.mtp))
            except MtpStudioError as e:
                return die(str(e), EXIT_INVALID)
            if not args.json:
                _print(rows[-1])
    if args.json:
        print(json.dumps([r.to_json() for r in rows]))
    else:
        worst = max(abs(r.error) for r in rows)
        print(f"largest error: {100 * worst:.1f}% over {len(rows)} loads")
    return EXIT_OK


def _print(r: MemoryRow) -> None:
    e = r.estimate
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
    print("    llama.cpp log: " + ", ".join(f"{k} {_mib(v)}" for k, v in r.logged.items()), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
