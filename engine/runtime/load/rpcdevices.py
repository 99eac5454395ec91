"""Remote devices for a model: registering RPC servers and placing layers on them.

Registration is upstream's ``--rpc`` sequence (``common/arg.cpp``: ``add_rpc_devices``):
``ggml_backend_reg_by_name("RPC")``, its ``ggml_backend_rpc_add_server`` entry point per
endpoint, ``ggml_backend_register``. llama.cpp aborts when a server cannot be reached,
so endpoints are connected to first (:func:`engine.rpc.endpoints.check_reachable`), and
this runs only in a worker process (:mod:`engine.runtime.worker`).

Placement (:func:`plan_placement`) is computed here, not left to llama.cpp, so it can be
shown and overridden: the trunk's layers are split across the remote devices and the
local one by free memory (or the user's weights), and the NextN (MTP) block, the output
norm and the output matrix are pinned to the local device with tensor overrides — drafts
then never cross the network, and only hidden states (not logits) come back per verify.
The MTP context also keeps its KV cache local (``offload_kqv`` off).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from engine.backends.ggmllib import rpc_entry_point
from engine.errors import InvalidSettingError, RpcError
from engine.rpc.endpoints import Endpoint, check_reachable, format_endpoints
from engine.runtime.llama.devices import DEVICE_TYPES, _ggml

_registered: dict[Endpoint, list[int]] = {}


_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)


def rpc_available() -> bool:
    """Whether the loaded build has the RPC backend."""
    return bool(_ggml().ggml_backend_reg_by_name(b"RPC"))


def register(endpoints: tuple[Endpoint, ...]) -> None:
    """Make each endpoint's devices visible to llama.cpp (once per process)."""
    todo = [ep for ep in endpoints if ep not in _registered]
    if not todo:
        return
    lib = _ggml()
    add = _ADD_SERVER(rpc_entry_point(lib, "ggml_backend_rpc_add_server"))
    check_reachable(todo)
    for ep in todo:
        sreg = add(str(ep).encode())
        if not sreg:
            raise RpcError(f"RPC server {ep} reports no devices.")
        lib.ggml_backend_register(sreg)
        _registered[ep] = [lib.ggml_backend_reg_dev_get(sreg, i) for i in range(lib.ggml_backend_reg_dev_count(sreg))]


@dataclass(frozen=True)
class Device:
    """A device a model can use. ``endpoint`` is None for this machine's own."""

    ptr: int
    name: str
    description: str
    kind: str  # cpu | gpu | igpu | ...
    memory_free: int
    memory_total: int
    endpoint: str | None = None

    @property
    def remote(self) -> bool:
        return self.endpoint is not None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "type": self.kind,
            "remote": self.remote,
            "endpoint": self.endpoint,
            "memory_free": self.memory_free,
            "memory_total": self.memory_total,
        }


def _device(lib, ptr: int, endpoint: str | None) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(ptr, ctypes.byref(free), ctypes.byref(total))
    return Device(
        ptr,
        lib.ggml_backend_dev_name(ptr).decode(),
        lib.ggml_backend_dev_description(ptr).decode(),
        DEVICE_TYPES.get(lib.ggml_backend_dev_type(ptr), "unknown"),
        free.value,
        total.value,
        endpoint,
    )


def devices(endpoints: tuple[Endpoint, ...]) -> tuple[list[Device], list[Device]]:
    """``(remote, local)``: the endpoints' devices in endpoint order, and this machine's
    GPUs, or its CPU when it has none."""
    register(endpoints)
    lib = _ggml()
    remote = [_device(lib, p, str(ep)) for ep in endpoints for p in _registered[ep]]
    remote_ptrs = {d.ptr for d in remote}
    local_all = [_device(lib, lib.ggml_backend_dev_get(i), None) for i in range(lib.ggml_backend_dev_count())]
    local_all = [d for d in local_all if d.ptr not in remote_ptrs]
    gpus = [d for d in local_all if d.kind in ("gpu", "igpu")]
    cpu = [d for d in local_all if d.kind == "cpu"][:1]
    return remote, gpus or cpu


# ---------------------------------------------------------------- placement
@dataclass
class Placement:
    """Where a model's layers go. ``devices`` is the order shown, weighted and handed to
    llama.cpp; the last is this machine's and holds the MTP block and the output layer."""

    devices: list[Device]
    layers: list[int]  # trunk layers per device
    #: for llama_model_params: every layer is offloaded, split by these fractions
    n_gpu_layers: int
    tensor_split: list[float]
    #: tensors pinned to this machine (tensor_buft_overrides)
    local_patterns: list[str]

    @property
    def local(self) -> Device:
        return self.devices[-1]

    def to_json(self) -> dict:
        return {
            "devices": [dict(d.to_json(), layers=n) for d, n in zip(self.devices, self.layers, strict=True)],
            "mtp_and_output": self.local.name,
            "n_gpu_layers": self.n_gpu_layers,
            "tensor_split": [round(x, 6) for x in self.tensor_split],
        }


def share_layers(n: int, weights: list[float]) -> list[int]:
    """``n`` layers in proportion to ``weights`` (largest remainder; ties go to the
    earlier device)."""
    total = sum(weights)
    if total <= 0:
        raise InvalidSettingError("The tensor split must give at least one device a positive share.")
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def plan_placement(
    remote: list[Device], local: list[Device], *, n_layer_trunk: int, n_nextn: int, weights: list[float] | None = None
) -> Placement:
    """Split ``n_layer_trunk`` trunk layers over ``remote + local`` (by free memory, or by
    ``weights``, one per device in that order); pin the NextN block and output locally."""
    shown = remote + local
    if not remote:
        raise RpcError("None of the RPC servers offers a device.")
    if weights is None:
        weights = [float(max(d.memory_free, 1)) for d in shown]
    elif len(weights) != len(shown):
        names = ", ".join(d.name for d in shown)
        raise InvalidSettingError(
            f"The tensor split has {len(weights)} values but there are {len(shown)} devices ({names}); give one "
            "weight per device, remote ones first, in the order listed."
        )
    if any(w < 0 for w in weights):
        raise InvalidSettingError("Tensor split weights cannot be negative.")
    counts = share_layers(n_layer_trunk, list(weights))
    n_layer_all = n_layer_trunk + n_nextn
    # Every layer is "offloaded", to params.devices in order by cumulative tensor_split
    # fractions (llama_model_base::load_tensors); this machine's device — its CPU too — is
    # the last, so the NextN block and the output layer (indices n_layer_trunk and up) land
    # on it. That matters beyond the weights: llama.cpp computes each layer's norms on that
    # layer's device, so a NextN layer assigned to a remote device would cost round trips
    # on every draft.
    act = n_layer_all + 1
    slots = list(counts)
    slots[-1] += n_nextn + 1
    split, cum, prev = [], 0, 0.0
    for j, n in enumerate(slots):
        cum += n
        bound = 1.0 if j == len(slots) - 1 else (cum - 0.5) / act  # mid-gap bounds: no float ties
        split.append(max(0.0, bound - prev))
        prev = max(prev, bound)
    patterns = [rf"^blk\.{il}\." for il in range(n_layer_trunk, n_layer_all)] + [r"^output\.", r"^output_norm\."]
    return Placement(shown, counts, act, split, patterns)


class _Override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class LlamaParams:
    """The ctypes arrays a placement needs in ``llama_model_params``, kept alive for the
    load."""

    def __init__(self, p: Placement):
        n = len(p.devices)
        self.devices = (ctypes.c_void_p * (n + 1))(*[d.ptr for d in p.devices], None)
        self.tensor_split = (ctypes.c_float * n)(*p.tensor_split)
        # the CPU device's buffer type is ggml_backend_cpu_buffer_type(), which llama.cpp
        # recognises in overrides to allow CPU weight repacking
        buft = _ggml().ggml_backend_dev_buffer_type(p.local.ptr)
        self._patterns = [s.encode() for s in p.local_patterns]
        self.overrides = (_Override * (len(self._patterns) + 1))(
            *[_Override(s, buft) for s in self._patterns], _Override(None, None)
        )
        self.n_gpu_layers = p.n_gpu_layers

    def apply(self, params) -> None:
        params.devices = ctypes.cast(self.devices, ctypes.c_void_p)
        params.tensor_buft_overrides = ctypes.cast(self.overrides, ctypes.c_void_p)
        params.tensor_split = ctypes.cast(self.tensor_split, ctypes.POINTER(ctypes.c_float))
        params.n_gpu_layers = self.n_gpu_layers


class LocalOnly:
    """Model params that keep a model (a separate MTP head) on this machine while RPC
    devices are registered: an explicit device list, so the head never lands on them
    whatever llama.cpp's default device choice is."""

    def __init__(self, local: Device):
        ptrs = [] if local.kind == "cpu" else [local.ptr]  # no devices: llama.cpp's plain CPU placement
        self.devices = (ctypes.c_void_p * (len(ptrs) + 1))(*ptrs, None)

    def apply(self, params) -> None:
        params.devices = ctypes.cast(self.devices, ctypes.c_void_p)


# ------------------------------------------------------------------ the child
def survey(endpoints: tuple[Endpoint, ...], model: str | None = None, weights: list[float] | None = None) -> dict:
    """Devices (and, for ``model``, the placement) as JSON. Registration can abort the
    process, so callers run this in a child (:func:`survey_in_child`)."""
    remote, local = devices(endpoints)
    out: dict = {"endpoints": [str(e) for e in endpoints], "devices": [d.to_json() for d in remote + local]}
    if model is not None:
        from engine.gguf.validate import validate_path

        report, facts, _ = validate_path(model)
        if not report.valid:
            raise InvalidSettingError(f"{model} is not a valid GGUF: {report.errors[0].message}")
        p = plan_placement(
            remote, local, n_layer_trunk=(facts.block_count or 0) - facts.nextn_layers, n_nextn=facts.nextn_layers,
            weights=weights,
        )  # fmt: skip
        out["placement"] = p.to_json()
    return out


def survey_in_child(endpoints: tuple[Endpoint, ...], model: str | None = None, weights=None, timeout: float = 60) -> dict:
    """:func:`survey` in a child process, after a handshake with every endpoint."""
    from engine.childproc import run_child

    check_reachable(endpoints)
    args = ["--rpc", format_endpoints(endpoints)]
    if model:
        args += ["--model", str(model)]
    if weights:
        args += ["--tensor-split", ",".join(str(w) for w in weights)]
    out = run_child(__name__, *args, timeout=timeout)
    if out.returncode != 0 or "devices" not in out.last:
        said = out.last.get("error") or " / ".join(out.stderr_tail) or out.signal_name
        raise RpcError(f"Could not list the RPC devices: {said}")
    return out.last


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    from engine.errors import MtpStudioError
    from engine.rpc.endpoints import parse_endpoints

    ap = argparse.ArgumentParser(prog="python -m engine.runtime.load.rpcdevices")
    ap.add_argument("--rpc", required=True)
    ap.add_argument("--model")
    ap.add_argument("--tensor-split")
    a = ap.parse_args(argv)
    try:
        weights = [float(x) for x in a.tensor_split.split(",")] if a.tensor_split else None
        print(json.dumps(survey(parse_endpoints(a.rpc), a.model, weights)), flush=True)
    except (MtpStudioError, ValueError) as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
