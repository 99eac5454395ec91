"""Proving a model runs before this process decodes it: a child loads and decodes first.

llama.cpp can end the process on files that load fine: the AMX weight-repack kernels
crash with SIGSEGV on the first decode of quantized models on some Xeons
(ggml-org/llama.cpp#20824), and a ``GGML_ASSERT`` aborts on metadata no validator
checks. The engine is in-process, so that would close the app. Before a (model files,
llama.cpp build, load settings) combination is first decoded here, a child process
(:mod:`engine.runtime.load.loadcheck_child`) loads it and decodes a few tokens, plain and with
MTP when there is a draft source. The child loads as this machine's repacking verdict
says (:mod:`engine.runtime.llama.repack`: where the CPU's repacked kernels crash, no
model tries them). When the child crashes with repacking on, it is diagnosed and the
known-safe fallback is tried (CPU weight repacking, llama.cpp's "extra buffer types",
off) for this model; what worked is cached, so later loads are instant.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.childproc import ChildOutcome, run_child
from engine.errors import ModelLoadError, NativeCrashError
from engine.fileio import read_json_dict, write_json_atomic
from engine.paths import cache_dir
from engine.runtime.llama import repack
from engine.runtime.llama.cachekey import model_key

PROBE_VERSION = 2
CHILD_MODULE = "engine.runtime.load.loadcheck_child"
#: how much lower the probe child's CPU priority is than this process's (POSIX nice; see _run)
PROBE_NICE = 10
#: test seam: make the child crash like the AMX kernels do ("extra-bufts": only with
#: extra buffer types on; "always"), on machines whose CPU does not crash by itself
CRASH_ENV = "MTP_STUDIO_PROBE_CRASH"


@dataclass(frozen=True)
class ProbeRequest:
    path: str
    head: str | None
    mtp: str  # resolved source: off | integrated | external
    n_gpu_layers: int
    max_draft_depth: int
    n_threads: int | None = None
    exact: bool = False
    #: a projector loaded beside the model: the child loads it too and decodes a picture
    mmproj: str | None = None


@dataclass
class LoadVerdict:
    """What the probe established: the settings to load with, and what it had to do."""

    #: None: no probe ran, so as this machine's verdict says (engine.runtime.llama.repack)
    use_extra_bufts: bool | None = None
    #: user-facing sentences, one per fallback taken (empty when none was needed)
    fallbacks: list[str] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0


# ------------------------------------------------------------------------ cache
def _key(req: ProbeRequest) -> str:
    return model_key(
        PROBE_VERSION,
        req.path,
        req.head,
        req.mtp,
        req.n_gpu_layers,
        req.max_draft_depth,
        req.exact,
        req.mmproj,
        os.environ.get(CRASH_ENV, ""),
        repack.allowed(),
        # the CPU too (its name and flags): a cache folder shared between machines (a
        # synced or network home) must not carry one machine's verdict to another
        repack.cpu_name(),
        ",".join(repack.cpu_flags()),
    )


def _cache_file() -> Path:
    return cache_dir() / "load-probe.json"


def _read_cache() -> dict:
    return read_json_dict(_cache_file())


def _remember(key: str, verdict: LoadVerdict) -> None:
    cache = _read_cache()
    cache[key] = {"use_extra_bufts": verdict.use_extra_bufts, "fallbacks": verdict.fallbacks}
    write_json_atomic(_cache_file(), cache, fsync=False)


def _cached(key: str) -> LoadVerdict | None:
    entry = _read_cache().get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("use_extra_bufts"), bool):
        return None
    fallbacks = entry.get("fallbacks")
    if not isinstance(fallbacks, list) or not all(isinstance(x, str) for x in fallbacks):
        return None
    return LoadVerdict(entry["use_extra_bufts"], fallbacks, cached=True)


# ----------------------------------------------------------------------- parent
def _run(req: ProbeRequest, extra_bufts: bool, timeout: float, cancel: threading.Event | None) -> ChildOutcome:
    args = [req.path, "--mtp", req.mtp, "--gpu-layers", str(req.n_gpu_layers), "--depth", str(req.max_draft_depth)]
    if req.head:
        args += ["--head", req.head]
    if req.n_threads:
        args += ["--threads", str(req.n_threads)]
    if not extra_bufts:
        args.append("--no-extra-bufts")
    if req.exact:
        args.append("--exact")
    if req.mmproj:
        args += ["--mmproj", req.mmproj]
    # at a lower priority: on a machine with few cores a probe's decodes beside running
    # streams stalled them (llama.cpp's threads wait on each other at every op; a thread
    # the probe displaced held a stream's token back 0.77 s on 2 cores; at nice 10 the
    # longest gap was 5.9-7.3 ms). Not the lowest: on a machine the streams saturate, a
    # probe at nice 19 got almost no CPU (a load beside them took 22.8 s)
    return run_child(CHILD_MODULE, *args, timeout=timeout, cancel=cancel, nice=PROBE_NICE)


def _describe_crash(o: ChildOutcome) -> str:
    stage = o.last.get("stage") or "start"
    if o.timed_out:
        return f"llama.cpp did not finish (stage: {stage}) within the time allowed"
    if o.signal_name == "SIGABRT":
        what = "llama.cpp aborted (SIGABRT: one of its internal checks failed)"
    elif o.crashed:
        what = f"llama.cpp crashed ({o.signal_name})"
    else:
        what = f"the check ended with {o.signal_name}"
    msg = f"{what} while {_STAGES.get(stage, stage)}"
    if o.stderr_tail:
        msg += ": " + " | ".join(o.stderr_tail)
    return msg


_STAGES = {
    "start": "starting",
    "load": "loading the model",
    "context": "creating its contexts",
    "decode": "decoding the first tokens",
    "mtp": "drafting with MTP",
    "picture": "encoding and decoding a picture with the projector",
}


def check_load(req: ProbeRequest, *, timeout: float = 600.0, cancel: threading.Event | None = None) -> LoadVerdict:
    """Probe ``req`` in a child process (once per files, build and settings) and return
    the settings that work. Raises :class:`NativeCrashError` when llama.cpp crashes
    even with the fallback, :class:`ModelLoadError` when it refuses the model, and
    :class:`~engine.errors.Cancelled` when ``cancel`` is set."""
    key = _key(req)
    hit = _cached(key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    machine = repack.allowed()  # off where this CPU's repacked kernels crash: no model tries them
    first = _run(req, machine, timeout, cancel)
    if first.returncode == 0 and first.last.get("ok"):
        verdict = LoadVerdict(machine, [])
    elif first.returncode == 0 and first.last.get("error"):
        raise ModelLoadError(f"llama.cpp rejects {Path(req.path).name}: {first.last['error']}")
    elif not machine or first.last.get("stage") in ("load", "start", "picture", None) or first.timed_out:
        # the repack kernels run on decode: a crash before it has no known-safe fallback
        raise NativeCrashError(
            f"{_describe_crash(first)}. MTP Studio kept running; {Path(req.path).name} cannot be used with this "
            "llama.cpp build. Check it with `mtp-studio validate --probe`, or try another file or backend build."
        )
    else:
        crash = _describe_crash(first)
        second = _run(req, False, timeout, cancel)
        if second.returncode == 0 and second.last.get("ok"):
            amx = (
                " (this CPU has AMX, whose repack kernels are known to crash: ggml-org/llama.cpp#20824)"
                if repack.cpu_has_amx()
                else ""
            )
            verdict = LoadVerdict(
                False,
                [
                    f"{crash}. With CPU weight repacking (llama.cpp's extra buffer types) off it runs, so this "
                    f"model is loaded with repacking off{amx}. Prompt processing may be slower."
                ],
            )
        elif second.returncode == 0 and second.last.get("error"):
            raise ModelLoadError(f"llama.cpp rejects {Path(req.path).name}: {second.last['error']}")
        else:
            raise NativeCrashError(
                f"{crash}. It also failed with CPU weight repacking off ({_describe_crash(second)}). "
                f"MTP Studio kept running; {Path(req.path).name} cannot be used with this llama.cpp build. "
                "Try another quantization of the model or another backend build."
            )
    verdict.seconds = time.perf_counter() - t0
    _remember(key, verdict)
    return verdict
