"""The compute devices llama.cpp sees (ggml's device registry), from the loaded library.

llama-cpp-python does not bind ``ggml_backend_dev_*``; they are exported by the
``ggml`` library next to ``llama`` (prototypes: :mod:`engine.backends.ggmllib`).
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.backends.ggmllib import DEVICE_TYPES, open_ggml
from engine.runtime.llama.lib import llama


def loaded_lib_dir() -> Path:
    llama()  # bind the library (LLAMA_CPP_LIB_PATH decides which)
    import llama_cpp.llama_cpp as raw

    return Path(raw._lib._name).parent


def _ggml() -> ctypes.CDLL:
    """The ggml library next to the loaded ``llama`` library."""
    return open_ggml(loaded_lib_dir())


#: the device types that are GPUs (a discrete one, or integrated)
GPU_TYPES = ("gpu", "igpu")


@dataclass(frozen=True)
class Device:
    """One compute device of the loaded backend build."""

    name: str
    description: str
    #: cpu | gpu | igpu | accel | unknown (ggml's device types)
    type: str
    memory_total: int
    memory_free: int

    @property
    def gpu(self) -> bool:
        return self.type in GPU_TYPES

    def to_json(self) -> dict:
        return asdict(self)


def list_devices() -> list[Device]:
    """Every device of the loaded backend build: name, description, type, memory."""
    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(
            Device(
                lib.ggml_backend_dev_name(dev).decode(),
                lib.ggml_backend_dev_description(dev).decode(),
                DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "unknown"),
                total.value,
                free.value,
            )
        )
    return out
