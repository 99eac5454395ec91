"""Running the real ``mtp-studio`` command in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def mtp_studio(
    *args: str, timeout: float = 300, check: bool = False, env: dict | None = None, cwd: str | os.PathLike | None = None
) -> subprocess.CompletedProcess:
    """``env``: variables set for this run on top of this process's; ``cwd``: the folder it runs in."""
    cmd = [sys.executable, "-m", "app.launcher", *args]
    env = {**os.environ, "GGML_NO_BACKTRACE": "1", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"mtp-studio {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def mtp_json(*args: str, timeout: float = 300, env: dict | None = None) -> dict:
    proc = mtp_studio(*args, "--json", timeout=timeout, check=True, env=env)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one JSON line, got {proc.stdout!r}"
    return json.loads(lines[0])
