"""Running a piece of this program in a child process.

Work that can abort the whole process (llama.cpp asserts on some malformed files, a
backend build) runs in a child. In a source install the child is
``python -m <module>``; in the frozen app it is the app binary itself with a hidden
``--child <module>`` argument that :func:`engine.cli.main` dispatches.
"""

from __future__ import annotations

import os
import sys


def module_command(module: str, *args: str) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "--child", module, *args]
    return [sys.executable, "-m", module, *args]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GGML_NO_BACKTRACE", "1")
    env.update(extra)
    return env
