"""``engine/`` never imports Qt, even indirectly at import time (the static import
contracts are in pyproject.toml and checked by tests/test_architecture.py)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import engine

QT = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "qtpy")


def test_importing_every_engine_module_loads_no_qt():
    modules = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {QT!r}]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
