"""``mtp-studio bench slots|agent|...``: thin entries into the source checkout's benchmarks
harness (engine/cli/benchharness.py). From a checkout a command runs its harness module with
every argument; where the harness is not beside the engine (the frozen app) it says so in
one line and exits with the usage status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine.cli.benchharness import HARNESS
from tests.engine.cli_helpers import mtp_studio

ROOT = Path(__file__).resolve().parents[2]


def test_bench_help_lists_every_harness_benchmark():
    out = mtp_studio("bench", "--help", check=True).stdout
    for name in HARNESS:
        assert name in out, name


def test_a_harness_command_hands_every_argument_to_its_module(tmp_path):
    """``--help`` included: the harness's parser answers it, under the command's name —
    from any folder (the console script does not run in the checkout)."""
    for name in HARNESS:
        p = mtp_studio("bench", name, "--help", check=True, cwd=tmp_path)
        assert p.stdout.startswith(f"usage: mtp-studio bench {name} "), (name, p.stdout[:200])
    bad = mtp_studio("bench", "slots", "--clients", "1", cwd=tmp_path)  # --model is required
    assert bad.returncode == 2 and "mtp-studio bench slots: error:" in bad.stderr and "--model" in bad.stderr


def test_without_the_checkout_a_harness_command_says_so_in_one_line(tmp_path):
    """An install whose engine has no benchmarks package beside it: the engine and the app
    (linked, unchanged) in a folder of their own."""
    for pkg in ("engine", "app"):
        (tmp_path / pkg).symlink_to(ROOT / pkg, target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), GGML_NO_BACKTRACE="1")
    cmd = [sys.executable, "-m", "app.launcher", "bench", "slots", "--model", "m.gguf"]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("mtp-studio: bench slots is a benchmark of the source checkout") and "make run" in line
