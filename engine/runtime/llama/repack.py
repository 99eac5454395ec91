"""Whether llama.cpp's repacked CPU kernels run on this machine: one verdict per CPU and build.

llama.cpp repacks quantized weights into the layouts its fastest CPU kernels read
("extra buffer types": AVX2/AVX-512 Q4_0, Q4_K and IQ4_NL layouts, AMX tiles, ARM's
i8mm layouts). On some machines those kernels die: on Xeons with AMX in some cloud VMs
the first decode of any quantized model ends the process with SIGILL (SIGSEGV on others,
ggml-org/llama.cpp#20824), and llama-server dies with it unless started with
``--no-repack``. Whether they run is a fact about the CPU and the llama.cpp build, not
about a model, so it is found once: a child (:mod:`engine.runtime.llama.repack_child`)
loads the bundled demo model and two quantizations of it with repacking on, on the CPU
alone, and decodes one row and a batch of rows with each. When that child crashes and the
same run with repacking off does not, repacking is off for this CPU and build.

The verdict is remembered in ``cache_dir()/cpu-repack.json`` under the CPU's identity
(model name and feature flags) and the build's (:func:`~engine.runtime.llama.cachekey.build_identity`),
and applied wherever this program runs ggml: :meth:`Model.load <engine.runtime.llama.model.Model.load>`
reads it unless a caller says otherwise, so every load follows it — the app's, the load
probe's child, a ``probe=False`` load, the worker process of a model over RPC, the fit
measurements, the benchmarks, the self-test and a backend build's smoke test (which probes
its own build). ``rpc serve`` needs nothing: llama.cpp's RPC server allocates every tensor
with its device's default buffer type, which is never repacked. Where the kernels run,
repacking stays on: it is the fast path for prompt processing.

``MTP_STUDIO_REPACK=off`` (or llama-server's ``LLAMA_ARG_REPACK=0``) turns repacking off
without a probe, ``MTP_STUDIO_REPACK=on`` keeps it on without one.

Threads: :func:`verdict` may be called from any thread. The first call in a process for a
(CPU, build) pair probes, under a lock, while other callers wait; the result is kept for
the life of the process. The cache file is written atomically, so processes that probe at
once (an app and its children) each leave a whole file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

from engine.childproc import ChildOutcome, run_child
from engine.fileio import read_json_dict, write_json_atomic
from engine.paths import cache_dir
from engine.runtime.llama.cachekey import build_identity

VERSION = 1
CHILD_MODULE = "engine.runtime.llama.repack_child"
#: the user's override: "off" / "on" (anything else: probe)
OVERRIDE_ENV = "MTP_STUDIO_REPACK"
#: llama-server's own switch (``--no-repack``), honoured when it says off
LLAMA_ARG_ENV = "LLAMA_ARG_REPACK"
#: test seam: this process and its children behave as a CPU whose repacked kernels die —
#: a load with repacking on ends the process with SIGILL (``Model.load``). Tests use it to
#: check every path applies the verdict on machines whose kernels run.
SIMULATE_CRASH_ENV = "MTP_STUDIO_SIMULATE_REPACK_CRASH"
PROBE_TIMEOUT = 180.0


@dataclass(frozen=True)
class RepackVerdict:
    """Whether loads on this machine may use repacked weights, and why."""

    allowed: bool
    #: "ran": the repacked kernels ran; "crashed": they crashed and the same run without
    #: them did not; "override": the user's setting; "untested": the check could not tell
    #: (it failed with repacking off too) and repacking stays as llama.cpp has it
    status: str
    #: one sentence for the user ("" when there is nothing to say)
    reason: str
    cpu: str
    cached: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def notice(self) -> str | None:
        """What the status line and the Backend page say: None while repacking is on."""
        if self.allowed:
            return None
        return f"CPU weight repacking is off on this CPU ({self.cpu}): {self.reason}"


# ------------------------------------------------------------------ identity
@functools.cache
def cpu_name() -> str:
    """The CPU's model name as the OS reports it (read once per process)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


@functools.cache
def cpu_flags() -> tuple[str, ...]:
    """The CPU's feature flags (Linux; elsewhere the architecture), sorted (read once per
    process: /proc/cpuinfo is large on many-core machines, and every load asks)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return tuple(sorted(set(line.split(":", 1)[1].split())))
    except OSError:
        pass
    return (platform.machine(),)


def cpu_has_amx() -> bool:
    flags = set(cpu_flags())
    return "amx_int8" in flags or "amx_tile" in flags


def key() -> str:
    """The cache key: this CPU, this llama.cpp build, and the test seam."""
    parts = [str(VERSION), cpu_name(), *cpu_flags(), *build_identity(), os.environ.get(SIMULATE_CRASH_ENV, "")]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# ---------------------------------------------------------------------- cache
def _cache_file():
    return cache_dir() / "cpu-repack.json"


def _read_cache() -> dict:
    return read_json_dict(_cache_file())


def cached_verdict() -> RepackVerdict | None:
    """The remembered verdict for this CPU and build, without probing (None: not found yet)."""
    k = key()
    with _lock:
        if k in _memo:
            return _memo[k]
    entry = _read_cache().get(k)
    if not isinstance(entry, dict) or not isinstance(entry.get("allowed"), bool):
        return None
    if entry.get("status") not in ("ran", "crashed") or not isinstance(entry.get("reason"), str):
        return None
    return RepackVerdict(entry["allowed"], entry["status"], entry["reason"], str(entry.get("cpu", "")), cached=True)


def _remember(k: str, v: RepackVerdict) -> None:
    cache = _read_cache()
    cache[k] = {"allowed": v.allowed, "status": v.status, "reason": v.reason, "cpu": v.cpu}
    write_json_atomic(_cache_file(), cache, fsync=False)


# ---------------------------------------------------------------------- probe
_lock = threading.Lock()
_probing = threading.Lock()
_memo: dict[str, RepackVerdict] = {}


def _override() -> RepackVerdict | None:
    own = os.environ.get(OVERRIDE_ENV, "").strip().lower()
    if own in ("off", "0", "false", "no"):
        return RepackVerdict(False, "override", f"{OVERRIDE_ENV}={own} turns it off", cpu_name())
    if own in ("on", "1", "true", "yes"):
        return RepackVerdict(True, "override", f"{OVERRIDE_ENV}={own} keeps it on", cpu_name())
    theirs = os.environ.get(LLAMA_ARG_ENV, "").strip().lower()
    if theirs in ("0", "false", "off", "disabled"):
        return RepackVerdict(False, "override", f"{LLAMA_ARG_ENV}={theirs} turns it off", cpu_name())
    return None


def _describe(o: ChildOutcome) -> str:
    if o.timed_out:
        return "did not finish in time"
    what = f"crashed ({o.signal_name})" if o.crashed else f"ended with {o.signal_name}"
    stage = o.last.get("stage")
    return f"{what}" + (f" while {stage}" if stage else "")


def probe() -> RepackVerdict:
    """Run the check in children now (no cache): repacking on; after a crash, repacking off."""
    t0 = time.perf_counter()
    cpu = cpu_name()
    with tempfile.TemporaryDirectory(prefix="mtp-studio-repack-") as work:  # removed here, crash or not
        on = run_child(CHILD_MODULE, "--work", work, timeout=PROBE_TIMEOUT)
        if on.returncode == 0 and on.last.get("ok"):
            return RepackVerdict(True, "ran", "", cpu, seconds=time.perf_counter() - t0)
        off = run_child(CHILD_MODULE, "--no-repack", "--work", work, timeout=PROBE_TIMEOUT)
    seconds = time.perf_counter() - t0
    if off.returncode == 0 and off.last.get("ok") and (on.crashed or on.timed_out):
        amx = " (this CPU has AMX; see ggml-org/llama.cpp#20824)" if cpu_has_amx() else ""
        return RepackVerdict(
            False,
            "crashed",
            f"llama.cpp's repacked kernels {_describe(on)}{amx}; without repacking the same check ran, so "
            "every model is loaded without it. Prompt processing may be slower.",
            cpu,
            seconds=seconds,
        )
    detail = "; ".join(on.stderr_tail[-1:] + off.stderr_tail[-1:])
    return RepackVerdict(
        True,
        "untested",
        f"the check of llama.cpp's repacked kernels could not tell (with repacking {_describe(on)}, without "
        f"{_describe(off)}{': ' + detail if detail else ''}); repacking is left on.",
        cpu,
        seconds=seconds,
    )


def verdict() -> RepackVerdict:
    """This machine's verdict: the user's override, else remembered, else probed once (a
    child process, a few seconds) and remembered. Never raises for a failed check: a check
    that cannot tell leaves repacking on and says so."""
    if (v := _override()) is not None:
        return v
    k = key()
    with _probing:  # one probe per process at a time; the others wait for its verdict
        with _lock:
            if k in _memo:
                return _memo[k]
        v = cached_verdict()
        if v is None:
            v = probe()
            if v.status in ("ran", "crashed"):
                try:
                    _remember(k, v)
                except OSError:
                    pass  # a read-only cache: probe again next time
        with _lock:
            _memo[k] = v
        return v


def allowed() -> bool:
    """Whether a load may use repacked weights on this machine."""
    return verdict().allowed


def llama_server_args() -> list[str]:
    """What llama-server needs to load as this program does here (benchmarks compare like
    with like, and where the repacked kernels crash llama-server dies on its first request
    without ``--no-repack``)."""
    return [] if allowed() else ["--no-repack"]


def simulate_crash_if_asked(use_extra_bufts: bool) -> None:
    """The test seam (:data:`SIMULATE_CRASH_ENV`): a load with repacking on dies as it
    would on a CPU whose repacked kernels crash."""
    if use_extra_bufts and os.environ.get(SIMULATE_CRASH_ENV) == "1":
        signal.raise_signal(signal.SIGILL)


def forget() -> None:
    """Drop this process's memo (tests, and after a backend switch)."""
    with _lock:
        _memo.clear()
