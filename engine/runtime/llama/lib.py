"""Loading llama-cpp-python's ctypes bindings, once, the safe way.

``import llama_cpp`` binds the shared library at import time, so everything that must
be decided before that happens is decided here: ``GGML_NO_BACKTRACE`` (an abort must not
try to attach gdb), ``LLAMA_CPP_LIB_PATH`` (the backend build selected by
``engine.backends``), and llama.cpp's log, which is routed into Python logging instead
of stderr. Nothing else in the project imports ``llama_cpp`` directly.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from engine.backends.builds import selected_lib_dir
from engine.runtime.llama.exact import note_loaded, prepare_environment

log = logging.getLogger("llama.cpp")

_lock = threading.Lock()
_modules: tuple[ModuleType, ModuleType] | None = None
_log_callback = None  # keep the ctypes callback alive
_mtmd: ModuleType | None = None
_partial: list[str] = []

# ggml_log_level (NONE, DEBUG, INFO, WARN, ERROR; 5 = continue) -> logging level.
# llama.cpp's INFO chatter is DEBUG here: the app's
# log should not fill with tensor lists.
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_CONT = 5
_last_level = logging.DEBUG


def configure_environment() -> None:
    """Environment that must be in place before llama.cpp is loaded (also inherited by
    child processes started from here): no gdb on abort, and the selected backend build
    (an explicit ``LLAMA_CPP_LIB_PATH`` wins; ``MTP_STUDIO_NO_BACKEND_SELECTION`` keeps
    the installed library, for smoke tests of exactly one build)."""
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    prepare_environment()
    if "LLAMA_CPP_LIB_PATH" not in os.environ and not os.environ.get("MTP_STUDIO_NO_BACKEND_SELECTION"):
        lib_path = selected_lib_dir()
        if lib_path:
            os.environ["LLAMA_CPP_LIB_PATH"] = lib_path
    # libmtmd (images and audio) must link the same libllama: a build that ships one is used
    chosen = os.environ.get("LLAMA_CPP_LIB_PATH")
    if chosen and "MTMD_CPP_LIB" not in os.environ and any(Path(chosen).glob("*mtmd*")):
        os.environ["MTMD_CPP_LIB"] = chosen


def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    global _last_level
    lvl = _last_level if level == _CONT else _LEVELS.get(level, logging.DEBUG)
    _last_level = lvl
    s = text.decode("utf-8", "replace")
    if not s.endswith("\n"):
        _partial.append(s)
        return
    line = ("".join(_partial) + s).rstrip("\n")
    _partial.clear()
    if "unused tensor" in line:
        lvl = logging.DEBUG  # NextN tensors are skipped on purpose when MTP is off
    elif "non-consecutive token position" in line:
        lvl = logging.DEBUG  # a recurrent state's position jumps at every M-RoPE picture (llama-server's too)
    if line.strip(". "):
        log.log(lvl, "%s", line)


def bindings() -> tuple[ModuleType, ModuleType]:
    """``(llama_cpp, llama_cpp_ext)``, imported and initialised on first use."""
    global _modules, _log_callback
    if _modules is not None:
        return _modules
    with _lock:
        if _modules is None:
            configure_environment()
            note_loaded()
            import llama_cpp
            from llama_cpp import llama_cpp_ext

            _log_callback = llama_cpp.llama_log_callback(_on_log)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _modules = (llama_cpp, llama_cpp_ext)
    return _modules


def llama() -> ModuleType:
    return bindings()[0]


def ext() -> ModuleType:
    return bindings()[1]


def mtmd() -> ModuleType:
    """``llama_cpp.mtmd_cpp``: libmtmd's bindings (images and audio), bound after llama.cpp."""
    global _mtmd
    if _mtmd is None:
        bindings()
        from llama_cpp import mtmd_cpp

        with _lock:  # its log into Python logging too, like llama.cpp's
            mtmd_cpp.mtmd_log_set(_log_callback, ctypes.c_void_p(0))
            mtmd_cpp.mtmd_helper_log_set(_log_callback, ctypes.c_void_p(0))
            _mtmd = mtmd_cpp
    return _mtmd


def default_threads() -> int:
    """Threads for decoding: the CPUs this process may run on. Oversubscribing (the
    bindings' default is 4) makes ggml's spinning threads fight and costs up to 30x."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


#: the GIL's switch interval while an engine runs (CPython's default is 5 ms): how long a
#: thread that wants the GIL waits before it asks the holder to let go. The engine thread
#: wants it back after every decode (llama.cpp runs without it); with the default, the
#: event loop writing a burst of chunks, or a request's thread rendering its prompt, held
#: every stream's next step for up to 5 ms. Measured on the demo over HTTP (2 cores, runs in
#: pairs): +1 to +6% tokens/s at 2 streams (three pairs), +2 to +11% at 4 and +0.3 to +5% at 1
#: (two pairs each).
SWITCH_INTERVAL_S = 0.0002


def prefer_decoding_thread() -> None:
    """Shorten the GIL's switch interval to :data:`SWITCH_INTERVAL_S` (never lengthen it)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)


def system_info() -> str:
    return llama().llama_print_system_info().decode("utf-8", "replace")
