"""What this machine has: OS and CPU features, Apple Silicon, NVIDIA GPUs, the CUDA
toolkit the build would use. Every probe is a real command; a probe that fails is
reported, never fatal.

Stdlib only: the Makefile runs the planner before any dependency is installed.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

from engine.backends.cuda_arch import cc_to_arch

TIMEOUT_S = 10


@dataclass
class Gpu:
    name: str
    compute_capability: str  # "8.6"
    memory_mib: int | None = None

    @property
    def arch(self) -> str:
        return cc_to_arch(self.compute_capability)


@dataclass
class Toolkit:
    version: str | None = None  # "12.4"
    source: str | None = None  # CUDACXX | NVCC | PATH | driver
    compiler: str | None = None  # path of nvcc (None for the driver fallback)


@dataclass
class Detection:
    os: str
    arch: str
    cpu: str = ""
    cpu_features: list[str] = field(default_factory=list)
    memory_bytes: int | None = None
    apple_silicon: bool = False
    metal: bool = False
    gpus: list[Gpu] = field(default_factory=list)
    driver_version: str | None = None
    driver_cuda_version: str | None = None
    toolkit: Toolkit = field(default_factory=Toolkit)
    errors: list[str] = field(default_factory=list)  # probes that failed (none fatal)

    def to_json(self) -> dict:
        return asdict(self)


class _Probe:
    """Runs probe commands with one environment (``PATH`` decides which nvcc,
    nvidia-smi and sysctl answer) and collects their failures."""

    def __init__(self, env: dict[str, str], errors: list[str]):
        self.env = env
        self.errors = errors

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.env.get("PATH", ""))

    def run(self, cmd: list[str], what: str, *, quiet: bool = False) -> str | None:
        errors = [] if quiet else self.errors
        exe = cmd[0] if os.sep in cmd[0] else self.which(cmd[0])
        if exe is None:
            errors.append(f"{what}: {cmd[0]} not found")
            return None
        try:
            p = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=TIMEOUT_S, env=self.env)
        except subprocess.TimeoutExpired:
            errors.append(f"{what}: {cmd[0]} did not answer within {TIMEOUT_S} s")
            return None
        except OSError as e:
            errors.append(f"{what}: cannot run {cmd[0]}: {e.strerror}")
            return None
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [""]
            errors.append(f"{what}: {cmd[0]} exited with status {p.returncode} {tail[0]}".rstrip())
            return None
        return p.stdout


# --------------------------------------------------------------------------- CPU
_X86_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni", "amx_tile")


def _linux_cpu(d: Detection, probe: _Probe) -> None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            info = f.read()
    except OSError as e:
        d.errors.append(f"cpu: cannot read /proc/cpuinfo: {e.strerror}")
        return
    m = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    d.cpu = m.group(1).strip() if m else ""
    flags = set()
    for key in ("flags", "Features"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", info, re.M)
        if m:
            flags |= set(m.group(1).split())
    d.cpu_features = [f for f in _X86_FEATURES if f in flags]
    if "asimd" in flags or "neon" in flags:
        d.cpu_features.append("neon")
    if "sve" in flags:
        d.cpu_features.append("sve")
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            m = re.search(r"^MemTotal:\s*(\d+) kB", f.read(), re.M)
            d.memory_bytes = int(m.group(1)) * 1024 if m else None
    except OSError:
        pass


def _mac(d: Detection, probe: _Probe) -> None:
    out = probe.run(["sysctl", "-n", "machdep.cpu.brand_string"], "cpu")
    d.cpu = (out or "").strip()
    out = probe.run(["sysctl", "-n", "hw.memsize"], "memory")
    if out and out.strip().isdigit():
        d.memory_bytes = int(out.strip())
    out = probe.run(["sysctl", "-n", "hw.optional.arm64"], "apple silicon", quiet=True)
    d.apple_silicon = (out or "").strip() == "1"
    if d.apple_silicon:
        d.cpu_features = ["neon"]
        out = probe.run(["sysctl", "-n", "hw.optional.arm.FEAT_DotProd"], "dotprod", quiet=True)
        if (out or "").strip() == "1":
            d.cpu_features.append("dotprod")
        # Every Apple Silicon Mac has a Metal 3 GPU, which llama.cpp's Metal backend needs.
        d.metal = True
    else:
        out = probe.run(["sysctl", "-n", "machdep.cpu.features", "machdep.cpu.leaf7_features"], "cpu features")
        flags = {f.lower().replace(".", "_") for f in (out or "").split()}
        d.cpu_features = [f for f in _X86_FEATURES if f in flags]


# ------------------------------------------------------------------------ NVIDIA
def _nvidia(d: Detection, probe: _Probe) -> None:
    out = probe.run(
        ["nvidia-smi", "--query-gpu=name,compute_cap,memory.total,driver_version", "--format=csv,noheader,nounits"],
        "nvidia gpus",
    )
    if out is None:
        return
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not re.fullmatch(r"\d+\.\d+", parts[1]):
            d.errors.append(f"nvidia gpus: cannot parse {line!r}")
            continue
        mem = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None
        d.gpus.append(Gpu(parts[0], parts[1], mem))
        if len(parts) > 3 and parts[3]:
            d.driver_version = parts[3]
    header = probe.run(["nvidia-smi"], "nvidia driver")
    m = re.search(r"CUDA Version:\s*([\d.]+)", header or "")
    if m:
        d.driver_cuda_version = m.group(1)


def _nvcc_version(probe: _Probe, path: str, what: str) -> str | None:
    out = probe.run([path, "--version"], what)
    m = re.search(r"release (\d+\.\d+)", out or "")
    if out is not None and not m:
        probe.errors.append(f"{what}: cannot find the release in `{path} --version`")
    return m.group(1) if m else None


def _toolkit(d: Detection, probe: _Probe) -> None:
    """The toolkit of the compiler the build will use: CUDACXX, then NVCC, then nvcc
    on PATH; the driver's CUDA version only as a labelled fallback."""
    for source in ("CUDACXX", "NVCC"):
        path = probe.env.get(source)
        if path:
            v = _nvcc_version(probe, path, f"cuda toolkit ({source})")
            if v:
                d.toolkit = Toolkit(v, source, path)
                return
    found = probe.which("nvcc")
    if found:
        v = _nvcc_version(probe, found, "cuda toolkit (PATH)")
        if v:
            d.toolkit = Toolkit(v, "PATH", found)
            return
    else:
        d.errors.append("cuda toolkit: nvcc not found (set CUDACXX or put nvcc on PATH to build for CUDA)")
    if d.driver_cuda_version:
        d.toolkit = Toolkit(d.driver_cuda_version, "driver", None)


# ------------------------------------------------------------------------- entry
def detect(*, env: dict[str, str] | None = None, os_name: str | None = None, machine: str | None = None) -> Detection:
    """Probe this machine. ``os_name``/``machine`` override what the platform module
    says (tests run the probes for another OS against stand-in commands)."""
    d = Detection(os=os_name or platform.system(), arch=machine or platform.machine())
    probe = _Probe(dict(os.environ if env is None else env), d.errors)
    if d.os == "Darwin":
        _mac(d, probe)
    elif d.os == "Linux":
        _linux_cpu(d, probe)
    else:
        d.cpu = platform.processor()
    if d.os != "Darwin":
        _nvidia(d, probe)
        _toolkit(d, probe)
    return d
