"""Remote devices for a model: registering RPC servers and listing the devices a model can use.

Registration is upstream's ``--rpc`` sequence (``common/arg.cpp``: ``add_rpc_devices``):
``ggml_backend_reg_by_name("RPC")``, its ``ggml_backend_rpc_add_server`` entry point per
endpoint, ``ggml_backend_register``. llama.cpp aborts when a server cannot be reached,
so endpoints are connected to first (:func:`engine.rpc.endpoints.check_reachable`), and
this runs only in a worker process (:mod:`engine.runtime.worker`) or a child
(:mod:`engine.runtime.load.rpcsurvey_child`). Placing layers on the devices is
:mod:`engine.runtime.load.placement`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from engine.backends.ggmllib import rpc_entry_point
from engine.errors import RpcError
from engine.rpc.endpoints import Endpoint, check_reachable
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
