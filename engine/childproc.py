"""Running a piece of this program in a child process.

Work that can abort the whole process (llama.cpp asserts on some malformed files, a
backend build) runs in a child. In a source install the child is
``python -m <module>``; in the frozen app it is the app binary itself with a hidden
``--child <module>`` argument that :func:`engine.cli.main` dispatches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from engine.errors import Cancelled


def module_command(module: str, *args: str) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "--child", module, *args]
    return [sys.executable, "-m", module, *args]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GGML_NO_BACKTRACE", "1")
    env.update(extra)
    return env


@dataclass
class ChildOutcome:
    """How a child run ended: its exit status, the last JSON line it printed (children
    print one line per stage, so an abort leaves the stage it died in), and the last
    lines of its stderr."""

    returncode: int
    last: dict
    stderr_tail: list[str]
    timed_out: bool = False

    @property
    def crashed(self) -> bool:
        """Killed by a signal (SIGSEGV, SIGABRT from a failed GGML_ASSERT, ...)."""
        return self.returncode < 0 or (os.name == "nt" and self.returncode not in (0, 1, 2))

    @property
    def signal_name(self) -> str:
        if self.returncode >= 0:
            return f"exit status {self.returncode}"
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


def run_child(
    module: str,
    *args: str,
    timeout: float,
    cancel: threading.Event | None = None,
    env: dict | None = None,
    nice: int = 0,
) -> ChildOutcome:
    """Run ``module`` in a child process and collect its outcome. Polls ``cancel`` and
    kills the child when it is set (then raises :class:`engine.errors.Cancelled`).
    ``nice`` > 0 runs it at a lower CPU priority (POSIX): background work that must not
    slow this process's decodes down."""

    proc = subprocess.Popen(
        module_command(module, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env or child_env(),
    )
    if nice > 0 and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, proc.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
        except OSError:
            pass  # it ran before we could lower it, or the platform refuses: it runs as it is
    deadline = time.monotonic() + timeout
    timed_out = False
    while True:
        try:
            out, err = proc.communicate(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                proc.kill()
                proc.communicate()
                raise Cancelled("child process cancelled") from None
            if time.monotonic() > deadline:
                proc.kill()
                out, err = proc.communicate()
                timed_out = True
                break
    last: dict = {}
    for line in reversed(out.strip().splitlines()):
        try:
            last = json.loads(line)
            break
        except ValueError:
            continue
    tail = [ln for ln in err.strip().splitlines() if ln.strip()][-3:]
    return ChildOutcome(proc.returncode, last if isinstance(last, dict) else {}, tail, timed_out)
