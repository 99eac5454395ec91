"""What llama.cpp says it allocated (its load log) and what the process holds.

llama.cpp logs each buffer it allocates: ``load_tensors: CPU_Mapped model buffer size =
… MiB``, ``llama_kv_cache: CPU KV buffer size = … MiB``, ``llama_memory_recurrent: CPU RS
buffer size = … MiB``, ``llama_context: CPU compute buffer size = … MiB`` and ``CPU output
buffer size``. :class:`BufferLog` collects them from the ``llama.cpp`` logger
(:mod:`engine.runtime.llama.lib` forwards the library's log there).
"""

from __future__ import annotations

import logging
import re
import sys
from collections import defaultdict

_BUFFER = re.compile(
    r"^(?P<who>\w+): +(?P<buft>\S+) (?P<what>model|KV|RS|compute|output) buffer size = +(?P<mib>[\d.]+) MiB"
)
#: the log's kind -> the estimate's part
PARTS = {"model": "weights", "KV": "kv", "RS": "recurrent", "compute": "compute", "output": "output"}


class BufferLog(logging.Handler):
    """Collects llama.cpp's buffer-size lines: bytes per part (weights, kv, recurrent,
    compute, output), each line as it came."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str, int]] = []  # (part, buffer type, bytes)

    @classmethod
    def attach(cls) -> BufferLog:
        """Start collecting (llama.cpp's INFO lines arrive as DEBUG: the logger is opened to them)."""
        h = cls()
        lg = logging.getLogger("llama.cpp")
        h._level = lg.level
        lg.addHandler(h)
        lg.setLevel(logging.DEBUG)
        return h

    def detach(self) -> None:
        lg = logging.getLogger("llama.cpp")
        lg.removeHandler(self)
        lg.setLevel(self._level)

    def emit(self, record: logging.LogRecord) -> None:
        m = _BUFFER.match(record.getMessage().strip())
        if m:
            self.lines.append((PARTS[m["what"]], m["buft"], round(float(m["mib"]) * (1 << 20))))

    def sizes(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for part, _, n in self.lines:
            out[part] += n
        return dict(out)


def current_rss() -> int:
    """This process's resident memory now, in bytes."""
    if sys.platform.startswith("linux"):
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return peak_rss()  # no cheap "now" elsewhere: the peak


def peak_rss() -> int:
    """This process's peak resident set, in bytes (Linux reports KiB, macOS bytes)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
