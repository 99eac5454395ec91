"""Stand-in ``nvcc`` / ``nvidia-smi`` / ``sysctl`` executables: the hardware this
machine lacks, answered by real programs on PATH (real subprocess calls and parsing)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _cat(text: str) -> str:
    return "cat <<'END_OF_TEXT'\n" + text.rstrip("\n") + "\nEND_OF_TEXT\n"


def nvcc(folder: Path, version: str, name: str = "nvcc") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    major, minor = version.split(".")
    return _script(
        folder / name,
        _cat(
            "nvcc: NVIDIA (R) Cuda compiler driver\n"
            "Copyright (c) 2005-2026 NVIDIA Corporation\n"
            "Built on Wed_Jan_15_19:20:09_PST_2026\n"
            f"Cuda compilation tools, release {major}.{minor}, V{major}.{minor}.85\n"
            f"Build cuda_{major}.{minor}.r{major}.{minor}/compiler.35404655_0\n"
        ),
    )


def nvidia_smi(folder: Path, gpus: list[tuple[str, str, int]], driver_cuda: str = "13.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = "\n".join(f"{name}, {cc}, {mem}, 580.65.06" for name, cc, mem in gpus)
    header = (
        "+-----------------------------------------------------------------------------------------+\n"
        f"| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: {driver_cuda}     |\n"
        "+-----------------------------------------------------------------------------------------+\n"
    )
    return _script(
        folder / "nvidia-smi",
        'if [ "$1" = "--query-gpu=name,compute_cap,memory.total,driver_version" ]; then\n'
        + _cat(rows)
        + "exit 0\nfi\n"
        + _cat(header),
    )


def sysctl_apple(folder: Path, chip: str = "Apple M3 Pro") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return _script(
        folder / "sysctl",
        'case "$2" in\n'
        f'machdep.cpu.brand_string) echo "{chip}";;\n'
        "hw.memsize) echo 38654705664;;\n"
        "hw.optional.arm64) echo 1;;\n"
        "hw.optional.arm.FEAT_DotProd) echo 1;;\n"
        "*) echo \"sysctl: unknown oid '$2'\" >&2; exit 1;;\n"
        "esac\n",
    )


def env_with(bin_dir: Path, **extra: str) -> dict[str, str]:
    """An environment whose PATH has the stand-ins and the basics ``sh`` needs."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "NVCC")}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env.update(extra)
    return env
