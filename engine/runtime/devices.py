"""The compute devices llama.cpp sees (ggml's device registry), from the loaded library.

llama-cpp-python does not bind ``ggml_backend_dev_*``; they are exported by the
``ggml`` library next to ``llama``, so they are bound here with ctypes.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

from engine.runtime.lib import llama

DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


def loaded_lib_dir() -> Path:
    llama()  # bind the library (LLAMA_CPP_LIB_PATH decides which)
    import llama_cpp.llama_cpp as raw

    return Path(raw._lib._name).parent


def _ggml() -> ctypes.CDLL:
    d = loaded_lib_dir()
    name = {"win32": "ggml.dll", "darwin": "libggml.dylib"}.get(sys.platform, "libggml.so")
    lib = ctypes.CDLL(str(d / name))
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, fn).argtypes = [ctypes.c_void_p]
        getattr(lib, fn).restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    lib.ggml_backend_dev_memory.restype = None
    return lib


def list_devices() -> list[dict]:
    """Every device of the loaded backend build: name, description, type, memory."""
    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(
            {
                "name": lib.ggml_backend_dev_name(dev).decode(),
                "description": lib.ggml_backend_dev_description(dev).decode(),
                "type": DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "unknown"),
                "memory_total": total.value,
                "memory_free": free.value,
            }
        )
    return out
