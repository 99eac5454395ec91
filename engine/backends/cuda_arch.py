"""Which GPU architectures each CUDA toolkit can compile for — one table, with why.

A CUDA build of llama.cpp only runs its kernels on the architectures it was compiled
for; a GPU it lacks silently falls back to the CPU (Ollama #17841: a CUDA 13 build
without the GPU's SM). So the build's architecture list must (1) contain every detected
GPU's own compute capability and (2) contain only what the toolkit that will compile it
can target. The toolkit version must come from that compiler (``nvcc``), not from the
driver: ``nvidia-smi`` reports the newest CUDA the *driver* supports, which on a
multi-toolkit machine says nothing about the compiler the build will use.

Stdlib only: the Makefile runs the planner before any dependency is installed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolkitRange:
    """Architectures a range of toolkit versions can target, and the reason."""

    first: tuple[int, int]  # inclusive
    last: tuple[int, int]  # inclusive
    supported: tuple[str, ...]  # compute capabilities without the dot, e.g. "86"
    default: tuple[str, ...]  # built when no GPU is detected (a portable build)
    why: str


ARCH_TABLE: tuple[ToolkitRange, ...] = (
    ToolkitRange(
        (11, 8),
        (11, 8),
        ("35", "37", "50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90"),
        ("61", "70", "75", "80", "86", "89", "90"),
        "CUDA 11.8 added Ada (8.9) and Hopper (9.0); it is the oldest toolkit llama.cpp's CUDA code supports.",
    ),
    ToolkitRange(
        (12, 0),
        (12, 7),
        ("50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90"),
        ("61", "70", "75", "80", "86", "89", "90"),
        "CUDA 12.0 dropped Kepler (3.x). Toolkits before 12.8 cannot target Blackwell (10.x, 12.x).",
    ),
    ToolkitRange(
        (12, 8),
        (12, 8),
        ("50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90", "100", "101", "120"),
        ("61", "70", "75", "80", "86", "89", "90", "100", "120"),
        "CUDA 12.8 added Blackwell: sm_100 (B200), sm_101, sm_120 (RTX 50 series).",
    ),
    ToolkitRange(
        (12, 9),
        (12, 99),
        (
            "50",
            "52",
            "53",
            "60",
            "61",
            "62",
            "70",
            "72",
            "75",
            "80",
            "86",
            "87",
            "89",
            "90",
            "100",
            "101",
            "103",
            "120",
            "121",
        ),
        ("61", "70", "75", "80", "86", "89", "90", "100", "120"),
        "CUDA 12.9 added sm_103 (B300) and sm_121 (DGX Spark).",
    ),
    ToolkitRange(
        (13, 0),
        (13, 99),
        ("75", "80", "86", "87", "88", "89", "90", "100", "103", "110", "120", "121"),
        ("75", "80", "86", "89", "90", "100", "120"),
        "CUDA 13.0 dropped Maxwell, Pascal and Volta (5.x-7.0): the oldest target is Turing (7.5).",
    ),
)


def parse_version(text: str) -> tuple[int, int] | None:
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def toolkit_range(version: tuple[int, int]) -> ToolkitRange | None:
    for r in ARCH_TABLE:
        if r.first <= version <= r.last:
            return r
    return None


def cc_to_arch(compute_capability: str) -> str:
    """``"8.6"`` -> ``"86"``; ``"12.0"`` -> ``"120"``."""
    major, _, minor = compute_capability.strip().partition(".")
    return f"{int(major)}{int(minor or 0)}"


def min_toolkit_for(arch: str) -> str | None:
    """Oldest toolkit in the table that can target ``arch``."""
    for r in ARCH_TABLE:
        if arch in r.supported:
            return f"{r.first[0]}.{r.first[1]}"
    return None


def max_toolkit_for(arch: str) -> str | None:
    """Newest toolkit range that still targets ``arch`` (for archs later dropped)."""
    last = None
    for r in ARCH_TABLE:
        if arch in r.supported:
            last = f"{r.last[0]}.x" if r.last[1] >= 99 else f"{r.last[0]}.{r.last[1]}"
    return last
