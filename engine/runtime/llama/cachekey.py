"""Cache keys for what was learned about a model on this machine.

The load check's verdict (:mod:`engine.runtime.load.loadcheck`) and the adaptive depth
policy (:mod:`engine.runtime.decode.policy.store`) hold for one (model file, MTP head,
llama.cpp build, settings) combination. Both key their caches with :func:`model_key`, so
a changed file (size or mtime) or build gives another key and stale entries are never used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path


def file_identity(path: str | Path | None) -> list[str]:
    """A file as a cache key sees it: where it is, its size and mtime (or ``-``)."""
    if path is None:
        return ["-"]
    p = Path(path)
    st = p.stat()
    return [str(p.resolve()), str(st.st_size), str(st.st_mtime_ns)]


def build_identity() -> list[str]:
    """Which llama.cpp library a child (and this process) loads: the selected backend
    build (``LLAMA_CPP_LIB_PATH``, see :mod:`engine.runtime.llama.lib`) or the one
    installed with llama-cpp-python."""
    lib = os.environ.get("LLAMA_CPP_LIB_PATH")
    if not lib:
        spec = importlib.util.find_spec("llama_cpp")
        lib = str(Path(spec.origin).parent / "lib") if spec and spec.origin else "?"
    out = [lib]
    p = Path(lib)
    if p.is_dir():
        for f in sorted(p.glob("*llama*")) + sorted(p.glob("*ggml*")):
            st = f.stat()
            out += [f.name, str(st.st_size), str(st.st_mtime_ns)]
    return out


def model_key(version: int, path: str | Path, head: str | Path | None, *settings: object) -> str:
    """SHA-256 (hex) of a cache format ``version``, the model file, its separate MTP head
    (None: none), the llama.cpp build and ``settings`` (each as ``str``)."""
    parts = [str(version), *file_identity(path), *file_identity(head), *build_identity(), *map(str, settings)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
