"""A real CPU build (pip reuses the wheel `make test` already built: llama.cpp is not
compiled twice), its smoke test, selecting it, and a fresh process loading llama.cpp
from the build's own folder through LLAMA_CPP_LIB_PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends import builds
from engine.backends.detect import detect
from engine.backends.plan import make_plan
from engine.errors import MtpStudioError
from engine.runtime.load.buildcheck import run_smoke
from tests.engine.cli_helpers import mtp_studio


@pytest.mark.slow
def test_cpu_build_smoke_select_and_load_from_its_folder():
    plan = make_plan(detect(env={"PATH": "/nonexistent"}), backend="cpu")
    assert plan.backend == "cpu" and plan.cmake_args == ""
    lines = []
    b = builds.build(plan, name="cpu-test", log=lines.append)
    assert any("llama_cpp_python" in line for line in lines)
    assert (b.lib_dir / "libllama.so").exists() and (b.lib_dir / "libggml.so").exists()
    with pytest.raises(MtpStudioError, match="smoke test"):
        builds.use("cpu-test")  # not proven yet
    report = run_smoke("cpu", str(b.lib_dir))
    assert report["ok"] and report["identical"] and report["lib_dir"] == str(b.lib_dir)
    assert report["devices"][0]["type"] == "cpu"
    builds.record_smoke("cpu-test", report)
    builds.use("cpu-test")
    assert builds.selected_lib_dir() == str(b.lib_dir)
    try:
        # a fresh process (the engine's way in) now loads llama.cpp from the build folder
        env = dict(os.environ)
        env.pop("LLAMA_CPP_LIB_PATH", None)
        code = "from engine.runtime.llama.devices import loaded_lib_dir; print(loaded_lib_dir())"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
        assert out.strip() == str(b.lib_dir)
        listing = json.loads(mtp_studio("backend", "list", "--json", check=True).stdout)
        assert listing["selected"] == "cpu-test"
        assert json.loads(mtp_studio("backend", "detect", "--json", check=True).stdout)["in_use"]["lib_dir"] == str(
            b.lib_dir
        )
    finally:
        mtp_studio("backend", "use", "installed", check=True)
    assert builds.selected_lib_dir() is None


def test_use_unknown_build():
    with pytest.raises(MtpStudioError, match="No build named"):
        builds.use("nope")
    p = mtp_studio("backend", "use", "nope")
    assert p.returncode == 1 and "No build named" in p.stderr


def test_a_gpu_build_that_runs_on_the_cpu_fails_its_smoke_test():
    """The installed library is a CPU build: claimed as CUDA, it must fail loudly."""
    report = run_smoke("cuda", None)
    assert not report["ok"] and "no GPU" in report["message"] and "run on the CPU" in report["message"]


def test_manifest_survives_a_corrupt_file():
    path = builds._manifest_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = path.read_text() if path.exists() else None
    try:
        path.write_text("{broken")
        assert builds.load_manifest().builds == []
        assert builds.selected_lib_dir() is None
    finally:
        if saved is None:
            path.unlink()
        else:
            path.write_text(saved)


def test_an_interrupted_build_does_not_leave_its_compile_running(tmp_path):
    """Ctrl-C or a timeout while pip compiles must end pip and its compilers too."""
    import time

    marker = tmp_path / "still-running"
    # the "compiler" (sleep) is running before the first log line; $$ is the shell's pid,
    # which leads the build's own process group (start_new_session)
    script = f"sleep 30 & echo started $$; wait; touch {marker}"
    groups = []

    def log(line):
        groups.append(int(line.split()[1]))
        raise KeyboardInterrupt  # as Ctrl-C arriving while the log streams

    with pytest.raises(KeyboardInterrupt):
        builds._run_streaming(["sh", "-c", script], dict(os.environ), [], log, None, None)
    # every process of the build's group ends (the killed ones go at once: no fixed wait)
    deadline = time.monotonic() + 10
    while _running_in_group(groups[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _running_in_group(groups[0]) == [] and not marker.exists()


def _running_in_group(pgid: int) -> list[int]:
    """The processes (zombies aside) in process group ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if int(group) == pgid and state != "Z":
            found.append(int(stat.parent.name))
    return found
