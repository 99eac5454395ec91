"""Which llama.cpp build this machine should use, why, and its exact CMAKE_ARGS.

Metal on Apple Silicon; CUDA when an NVIDIA GPU is present and the toolkit that will
compile the build can target it (the architecture list follows the toolkit and always
includes every detected GPU's own compute capability); the CPU otherwise. Whatever
cannot be done is said in ``problems`` — a GPU the toolkit cannot target never turns
into a build that silently runs on the CPU.

``python -m engine.backends.plan --cmake-args`` prints only the CMAKE_ARGS (the
Makefile uses it for the first install). Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field

from engine.backends.cuda_arch import max_toolkit_for, min_toolkit_for, parse_version, toolkit_range
from engine.backends.detect import Detection, detect


@dataclass
class Plan:
    backend: str  # metal | cuda | cpu
    cmake_args: str
    cuda_architectures: list[str] = field(default_factory=list)
    toolkit: dict = field(default_factory=lambda: {"version": None, "source": None})
    gpus: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    #: with llama.cpp's RPC backend (GGML_RPC): serve this machine to others, use theirs
    rpc: bool = False

    def to_json(self) -> dict:
        return asdict(self)


#: CMAKE_ARGS that add llama.cpp's RPC backend (client and server) to any build
RPC_ARGS = "-DGGML_RPC=ON"
RPC_REASON = (
    "RPC: llama.cpp's RPC backend is built in, so this machine can lend its devices (`mtp-studio rpc serve`) "
    "and use other machines' (--rpc host:port,...). Its server is from the same vendored llama.cpp, so client and "
    "server speak the same protocol version."
)

#: CMAKE_ARGS of the "exact" CPU build: no llamafile sgemm, whose batched F16/F32
#: matmuls differ from one-row ones (engine.runtime.llama.exact)
EXACT_CPU_ARGS = "-DGGML_LLAMAFILE=OFF"


def make_plan(
    d: Detection, *, backend: str | None = None, portable: bool = False, exact: bool = False, rpc: bool = False
) -> Plan:
    """Plan for ``d``. ``backend`` forces a kind (errors say why it cannot work);
    ``portable`` adds the toolkit's default architectures to the detected ones;
    ``exact`` plans the batch-invariant CPU build (exact mode for F16/F32 models);
    ``rpc`` adds llama.cpp's RPC backend."""
    plan = _make_plan(d, backend=backend, portable=portable, exact=exact)
    if rpc:
        plan.rpc = True
        plan.cmake_args = " ".join(x for x in (plan.cmake_args, RPC_ARGS) if x)
        plan.reasons.append(RPC_REASON)
    return plan


def _make_plan(d: Detection, *, backend: str | None, portable: bool, exact: bool) -> Plan:
    if exact:
        plan = _plan(d, backend="cpu", portable=False)
        plan.cmake_args = " ".join(x for x in (plan.cmake_args, EXACT_CPU_ARGS) if x)
        plan.reasons.append(
            "Exact: llamafile's sgemm off, so F16/F32 weights multiply the same way in a batch as alone; with exact "
            "mode (--exact) greedy MTP output is bit-identical to one-token-at-a-time decoding. Prompt processing of "
            "F16/F32 models is slower; quantized models run as in the default build."
        )
        if backend not in (None, "cpu") or d.gpus or (d.apple_silicon and d.metal):
            plan.problems.append(
                "Exact mode is measured on the CPU backend only: GPU kernels also choose algorithms by batch size, "
                "and no batch-invariant configuration of them has been verified here. This plan builds for the CPU."
            )
        return plan
    return _plan(d, backend=backend, portable=portable)


def _plan(d: Detection, *, backend: str | None = None, portable: bool = False) -> Plan:
    gpus = [{"name": g.name, "compute_capability": g.compute_capability} for g in d.gpus]
    toolkit = {"version": d.toolkit.version, "source": d.toolkit.source}
    want = backend or ("metal" if d.apple_silicon and d.metal else "cuda" if d.gpus else "cpu")

    if want == "metal":
        if not (d.os == "Darwin" and d.apple_silicon):
            return Plan("cpu", "", toolkit=toolkit, gpus=gpus, problems=["Metal builds need a Mac with Apple Silicon."])
        return Plan(
            "metal",
            "-DGGML_METAL=on",
            toolkit=toolkit,
            gpus=gpus,
            reasons=[f"Apple Silicon ({d.cpu or d.arch}): llama.cpp's Metal backend runs on its GPU."],
        )

    if want == "cuda":
        return _cuda(d, gpus, toolkit, portable, forced=backend == "cuda")

    reasons = ["No supported GPU was found: llama.cpp's CPU backend, tuned for this CPU."]
    if d.cpu_features:
        reasons.append("CPU features: " + ", ".join(d.cpu_features))
    if d.toolkit.version and not d.gpus:
        reasons.append(f"A CUDA {d.toolkit.version} toolkit is installed, but no NVIDIA GPU answered nvidia-smi.")
    return Plan("cpu", "", toolkit=toolkit, gpus=gpus, reasons=reasons)


def _cuda(d: Detection, gpus: list[dict], toolkit: dict, portable: bool, forced: bool) -> Plan:
    problems: list[str] = []
    reasons: list[str] = []
    tk = d.toolkit
    if not tk.version or tk.source == "driver":
        msg = "No CUDA compiler (nvcc) was found, so a CUDA build cannot be compiled here."
        if tk.source == "driver":
            msg += (
                f" The driver supports CUDA up to {tk.version}, but that says nothing about an installed toolkit. "
                "Install the CUDA toolkit, or set CUDACXX to its nvcc."
            )
        else:
            msg += " Install the CUDA toolkit, or set CUDACXX to its nvcc."
        return Plan("cpu", "", toolkit=toolkit, gpus=gpus, problems=[msg])
    version = parse_version(tk.version)
    rng = toolkit_range(version) if version else None
    if rng is None:
        return Plan(
            "cpu",
            "",
            toolkit=toolkit,
            gpus=gpus,
            problems=[f"CUDA {tk.version} is not supported for llama.cpp builds (11.8 or newer is needed)."],
        )
    reasons.append(f"CUDA toolkit {tk.version} from {tk.source} ({tk.compiler}): {rng.why}")
    archs: list[str] = []
    for g in d.gpus:
        if g.arch in rng.supported:
            if g.arch not in archs:
                archs.append(g.arch)
            reasons.append(f"{g.name}: compute capability {g.compute_capability} -> sm_{g.arch}")
        else:
            lo, hi = min_toolkit_for(g.arch), max_toolkit_for(g.arch)
            if lo is not None and version < parse_version(lo):  # type: ignore[operator]
                need = f"CUDA {lo} or newer"
            elif hi is not None:
                need = f"a CUDA toolkit up to {hi}"
            else:
                need = "a toolkit that supports it"
            problems.append(
                f"CUDA {tk.version} cannot build for {g.name} (compute capability {g.compute_capability}, "
                f"sm_{g.arch}); "
                f"it needs {need}. A build from this toolkit would not run on that GPU."
            )
    if not d.gpus and forced:
        archs = list(rng.default)
        reasons.append("No NVIDIA GPU detected: building the toolkit's default architectures.")
    elif portable:
        archs = sorted(set(archs) | set(rng.default), key=int)
    if not archs:
        problems.append("No detected GPU can be targeted by this toolkit, so the CPU build is planned instead.")
        return Plan("cpu", "", toolkit=toolkit, gpus=gpus, problems=problems, reasons=reasons)
    archs.sort(key=int)
    cmake = f"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES={';'.join(archs)}"
    if tk.compiler:
        cmake += f" -DCMAKE_CUDA_COMPILER={tk.compiler}"
    return Plan("cuda", cmake, archs, toolkit, gpus, problems, reasons)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.backends.plan")
    ap.add_argument("--cmake-args", action="store_true", help="print only CMAKE_ARGS")
    ap.add_argument("--backend", choices=["metal", "cuda", "cpu"])
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--rpc", action="store_true", help="with llama.cpp's RPC backend")
    a = ap.parse_args(argv)
    plan = make_plan(detect(), backend=a.backend, exact=a.exact, rpc=a.rpc)
    if a.cmake_args:
        print(plan.cmake_args)
    else:
        print(json.dumps(plan.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
