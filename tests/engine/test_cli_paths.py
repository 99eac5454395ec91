"""``mtp-studio paths``: every folder comes from platformdirs, or MTP_STUDIO_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.cli_helpers import mtp_json


def test_paths_follow_mtp_studio_home(studio_home):
    found = mtp_json("paths")
    assert found["frozen"] is False
    assert Path(found["models"]) == studio_home / "data" / "models"
    assert Path(found["backends"]) == studio_home / "data" / "backends"
    for key in ("config", "cache", "logs"):
        assert Path(found[key]).is_relative_to(studio_home)


@pytest.mark.skipif(sys.platform != "linux", reason="XDG variables steer platformdirs on Linux only")
def test_paths_follow_the_platform_dirs_without_an_override(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MTP_STUDIO_HOME"}
    env.update(
        XDG_DATA_HOME=str(tmp_path / "d"), XDG_CONFIG_HOME=str(tmp_path / "c"), XDG_CACHE_HOME=str(tmp_path / "k")
    )
    out = subprocess.run(
        [sys.executable, "-m", "app.launcher", "paths"], capture_output=True, text=True, env=env, check=True, timeout=60
    ).stdout
    rows = dict(line.split(None, 1) for line in out.splitlines())
    assert rows["models"] == str(tmp_path / "d" / "mtp-studio" / "models")
    assert rows["config"] == str(tmp_path / "c" / "mtp-studio")
    assert rows["cache"] == str(tmp_path / "k" / "mtp-studio")
