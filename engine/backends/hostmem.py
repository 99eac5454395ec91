"""How much host memory a new load may take: what the OS says is available, within this
process's limits (a cgroup's memory.max, an address-space rlimit).

``MTP_STUDIO_HOST_MEMORY`` (bytes, or with a K/M/G suffix) replaces the reading: a
stand-in for a machine of another size, in tests and for users who want to keep memory
back for other programs.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from engine.errors import InvalidSettingError

OVERRIDE_ENV = "MTP_STUDIO_HOST_MEMORY"
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class HostMemory:
    total: int
    available: int
    #: what limited ``available`` below the OS's figure, in words (None: nothing)
    limit: str | None = None


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a size (e.g. 16G, 512M or a number of bytes)")
    return int(float(m[1]) * _SUFFIX[m[2].upper()])


def _linux() -> HostMemory:
    info = {}
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            k, _, v = line.partition(":")
            info[k] = int(v.split()[0]) * 1024
    total = info.get("MemTotal", 0)
    avail = info.get("MemAvailable", info.get("MemFree", 0))
    limit = None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="utf-8") as f:
            cap = f.read().strip()
        if cap != "max":
            with open("/sys/fs/cgroup/memory.current", encoding="utf-8") as f:
                room = int(cap) - int(f.read().strip())
            if room < avail:
                avail, limit = max(room, 0), f"this container's memory limit ({int(cap) >> 20} MiB)"
    except (OSError, ValueError):
        pass
    return HostMemory(total, avail, limit)


def _mac() -> HostMemory:
    total = int(subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True).stdout.strip() or 0)
    out = subprocess.run(["vm_stat"], capture_output=True, text=True).stdout
    page = int(m[1]) if (m := re.search(r"page size of (\d+)", out)) else 4096
    pages = {k.strip(): int(v.strip(" .")) for k, v in re.findall(r"^(Pages [^:]+):\s+(\d+)\.?$", out, re.MULTILINE)}
    free = sum(pages.get(k, 0) for k in ("Pages free", "Pages inactive", "Pages speculative", "Pages purgeable"))
    return HostMemory(total, free * page)


def _windows() -> HostMemory:
    class Status(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong)] + [
            (n, ctypes.c_ulonglong)
            for n in ("total", "avail", "pagefile", "availpagefile", "virtual", "availvirtual", "extended")
        ]

    s = Status()
    s.dwLength = ctypes.sizeof(Status)
    ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(s))  # type: ignore[attr-defined]
    return HostMemory(s.total, s.avail)


def host_memory() -> HostMemory:
    """Total and available host memory for a new load."""
    if over := os.environ.get(OVERRIDE_ENV):
        try:
            n = parse_size(over)
        except ValueError as e:
            raise InvalidSettingError(f"{OVERRIDE_ENV}: {e}. Set it to a size such as 16G, or unset it.") from None
        return HostMemory(n, n, f"{OVERRIDE_ENV}={over}")
    if sys.platform.startswith("linux"):
        mem = _linux()
    elif sys.platform == "darwin":
        mem = _mac()
    else:
        mem = _windows()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm", encoding="utf-8") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            room = max(soft - used, 0)
            if room < mem.available:
                return HostMemory(mem.total, room, f"this process's address-space limit ({soft >> 30} GiB)")
    except (ImportError, OSError, ValueError):
        pass
    return mem
