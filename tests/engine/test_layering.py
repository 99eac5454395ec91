"""``engine/`` never imports Qt: checked statically and by importing every module."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import engine

QT = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "qtpy")


def test_no_qt_import_statements_in_engine():
    root = Path(engine.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] in QT or n.split(".")[0] == "app"]
    assert offenders == []


def test_importing_every_engine_module_loads_no_qt():
    modules = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {QT!r}]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
