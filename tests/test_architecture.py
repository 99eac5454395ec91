"""The layer contracts in pyproject.toml ([tool.importlinter]) hold — the app enters the
engine through engine.facade only — no module takes part in an import cycle
(tools/importcycles.py), both checkers really check (a reversed contract fails; a cycle
written on purpose is found), pages reach the engine through the bridge, the code is
formatted and linted, and no module is over 500 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools import importcycles

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold():
    proc = _lint()
    assert proc.returncode == 0 and "0 broken" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_broken_layer_order_is_reported(tmp_path):
    cfg = tmp_path / "reversed.toml"
    cfg.write_text(
        '[tool.importlinter]\nroot_packages = ["engine"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "gguf below errors (wrong on purpose)"\ntype = "layers"\n'
        'layers = ["engine.errors", "engine.gguf"]\n'
    )
    proc = _lint("--config", str(cfg))
    assert proc.returncode != 0 and "engine.gguf" in proc.stdout and "BROKEN" in proc.stdout


def test_no_module_takes_part_in_an_import_cycle():
    found = importcycles.cycles(importcycles.graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_cycle_is_found_wherever_its_imports_are_written(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    # deferred and TYPE_CHECKING-only imports count: a cycle hidden is still a cycle
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n")
    (pkg / "c.py").write_text("def f():\n    import pkg.a\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # imports into the cycle, not part of it
    found = importcycles.cycles(importcycles.graph(tmp_path, ["pkg"]))
    assert found == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_the_pages_reach_the_engine_only_through_the_bridge():
    """The app enters the engine through engine.facade (the import contract), and the engine
    object itself is the app's services' (main, the endpoint service, the bridge): a page
    reads figures and submits jobs through the bridge only."""
    import re

    services = {"app/bridge.py", "app/main.py", "app/endpoint.py"}
    reaching = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "app").rglob("*.py"))
        if str(p.relative_to(ROOT)) not in services and re.search(r"\bbridge\.engine\b", p.read_text())
    ]
    assert not reaching, f"pages that reach past the bridge: {reaching}"


RUFF = Path(sys.executable).parent / "ruff"


def test_the_code_is_formatted():
    """Every file is as the formatter writes it (ruff format, pyproject.toml [tool.ruff]): run
    ``.venv/bin/ruff format .`` after an edit. No skip markers: one layout for the tree."""
    done = subprocess.run(
        [str(RUFF), "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
    skipped = subprocess.run(
        ["git", "grep", "-l", "fmt: " + "skip", "--", "*.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert skipped.stdout == "", skipped.stdout


def test_the_linter_finds_nothing():
    """pyflakes, lines of at most 120 columns and a few bug-only rules over the whole tree
    (pyproject.toml [tool.ruff])."""
    done = subprocess.run(
        [str(RUFF), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_the_linter_reports_an_undefined_name(tmp_path):
    """The same run catches what it is there for: a name used and never defined."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return undefined_thing\n")
    done = subprocess.run(
        [str(RUFF), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "F821" in done.stdout


def test_no_module_is_over_500_lines():
    """Modules small and named for what they do: none over 500 lines (split by what it does)."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    long = {f: n for f in files if (n := len((ROOT / f).read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}, long
