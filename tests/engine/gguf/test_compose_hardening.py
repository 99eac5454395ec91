"""Compose leaves nothing behind when it is killed politely (SIGTERM) or impolitely (its
stale temp files are swept next time), and bad output places are clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.models.compose import make_models
from engine.errors import ComposeError
from engine.gguf.compose import compose
from tests.engine.cli_helpers import mtp_studio


def _partials(folder):
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name)


def test_sigterm_mid_compose_removes_the_temp_file(tmp_path):
    (tmp_path / "in").mkdir()
    target, head = make_models(tmp_path / "in", 1536 << 20, vocab=1000, merges=100)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "app.launcher",
        "compose",
        "--target",
        str(target),
        "--head",
        str(head),
        "--out",
        str(out_dir / "c.gguf"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _partials(out_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert _partials(out_dir), "compose finished before it could be interrupted; use a larger target"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "cancelled; nothing was written" in err
    assert list(out_dir.iterdir()) == []


def test_stale_partials_of_dead_processes_are_swept_and_live_ones_kept(fixtures, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "30"])
    try:
        out = tmp_path / "c.gguf"
        stale = tmp_path / f".c.gguf.partial-{dead.pid}"
        busy = tmp_path / f".c.gguf.partial-{live.pid}"
        other = tmp_path / f".other.gguf.partial-{dead.pid}"
        for p in (stale, busy, other):
            p.write_bytes(b"x" * 100)
        compose(fixtures["partial"].trunk, fixtures["partial"].head, out)
        assert not stale.exists() and busy.exists() and other.exists() and out.is_file()
    finally:
        live.kill()
        live.wait()


def test_out_onto_an_existing_folder_is_a_clear_error(fixtures, tmp_path):
    (tmp_path / "dir.gguf").mkdir()
    for force in ([], ["--force"]):
        r = mtp_studio(
            "compose",
            "--target",
            str(fixtures["partial"].trunk),
            "--head",
            str(fixtures["partial"].head),
            "--out",
            str(tmp_path / "dir.gguf"),
            *force,
        )
        assert r.returncode == 1 and "is a folder" in r.stderr and "Traceback" not in r.stderr


def _make_read_only(folder) -> bool:
    """Make ``folder`` unwritable even for root where the filesystem allows it."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        return True
    return subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0


def test_out_into_a_read_only_folder_is_a_clear_error(fixtures, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if not _make_read_only(ro):
        pytest.skip("cannot make a read-only folder here (root, and no immutable attribute on this filesystem)")
    try:
        r = mtp_studio(
            "compose",
            "--target",
            str(fixtures["partial"].trunk),
            "--head",
            str(fixtures["partial"].head),
            "--out",
            str(ro / "c.gguf"),
        )
        assert r.returncode == 1 and "Traceback" not in r.stderr
        assert "not writable" in r.stderr or "Nothing was written" in r.stderr, r.stderr
        with pytest.raises(ComposeError):
            compose(fixtures["partial"].trunk, fixtures["partial"].head, ro / "c.gguf")
        assert list(ro.iterdir()) == []
    finally:
        subprocess.run(["chattr", "-i", str(ro)], capture_output=True)
        ro.chmod(0o700)
