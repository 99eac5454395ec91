"""The layer contracts in pyproject.toml ([tool.importlinter]) hold, and the checker
really checks (a reversed contract fails)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
