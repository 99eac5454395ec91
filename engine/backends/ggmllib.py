"""ctypes prototypes of ggml's backend registry (``ggml-backend.h``), which llama-cpp-python
does not bind: devices, backend registries, and the RPC backend's entry points.

:func:`open_ggml` opens a build's ggml library once and declares every prototype the
project uses (the device list, RPC registration, ``rpc serve``).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path

from engine.errors import RpcUnavailableError

#: the ggml library's file name in a build's lib folder
LIB_NAME = {"win32": "ggml.dll", "darwin": "libggml.dylib"}.get(sys.platform, "libggml.so")
#: enum ggml_backend_dev_type
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
CPU, ACCEL = 0, 3

_P, _S, _STR = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
_PROTOTYPES: dict[str, tuple[list, object]] = {
    "ggml_backend_load_all": ([], None),
    "ggml_backend_dev_count": ([], _S),
    "ggml_backend_dev_get": ([_S], _P),
    "ggml_backend_dev_by_name": ([_STR], _P),
    "ggml_backend_dev_by_type": ([ctypes.c_int], _P),
    "ggml_backend_dev_name": ([_P], _STR),
    "ggml_backend_dev_description": ([_P], _STR),
    "ggml_backend_dev_type": ([_P], ctypes.c_int),
    "ggml_backend_dev_memory": ([_P, ctypes.POINTER(_S), ctypes.POINTER(_S)], None),
    "ggml_backend_dev_buffer_type": ([_P], _P),
    "ggml_backend_reg_by_name": ([_STR], _P),
    "ggml_backend_reg_get_proc_address": ([_P, _STR], _P),
    "ggml_backend_reg_dev_count": ([_P], _S),
    "ggml_backend_reg_dev_get": ([_P, _S], _P),
    "ggml_backend_register": ([_P], None),
}

_open: dict[Path, ctypes.CDLL] = {}
_lock = threading.Lock()


def open_ggml(lib_dir: str | Path) -> ctypes.CDLL:
    """The ggml library in ``lib_dir``, with the prototypes declared (opened once)."""
    path = Path(lib_dir) / LIB_NAME
    with _lock:
        lib = _open.get(path)
        if lib is None:
            lib = ctypes.CDLL(str(path))
            for name, (args, res) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = args, res
            _open[path] = lib
    return lib


def rpc_entry_point(lib: ctypes.CDLL, name: str) -> int:
    """The address of the RPC backend's ``name`` (``ggml_backend_rpc_add_server``,
    ``ggml_backend_rpc_start_server``), as upstream's tools look it up."""
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcUnavailableError(
            "This llama.cpp build has no RPC backend, so it can neither lend this machine nor use others. Build one "
            "with `mtp-studio backend build --rpc` (a source install from `make` already has it)."
        )
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not addr:
        raise RpcUnavailableError(f"This build's RPC backend has no {name} entry point.")
    return addr
