"""One verdict per CPU and build on llama.cpp's repacked CPU kernels, applied everywhere ggml runs.

Where the repacked kernels run (this machine, unless it is an AMX VM whose kernels die), the
probe says so once and repacking stays on. A CPU whose kernels crash is played at the one
true seam, ``MTP_STUDIO_SIMULATE_REPACK_CRASH=1``: in a process with it, a load with
repacking on dies with SIGILL as the AMX kernels do, so any path that does not apply the
verdict dies here exactly as it would on that CPU. Those paths run as children — the probe
itself, in-process loads with and without the load probe, the engine thread, ``generate``,
``rpc serve`` with ``generate --rpc``, a build's smoke test, the memory measurement — each
with a home of its own, so each finds the verdict afresh.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from benchmarks.models.memlog import BufferLog
from engine.runtime.llama import repack
from engine.runtime.llama.lib import system_info
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from tests.engine.cli_helpers import mtp_json, mtp_studio

#: llama.cpp's weight buffers that are not repacked (mapped from the file, or plain host memory)
PLAIN_BUFFERS = {"CPU", "CPU_Mapped"}


@pytest.fixture
def crashing_cpu(tmp_path) -> dict[str, str]:
    """The environment of a process on a CPU whose repacked kernels crash, with a fresh home."""
    return {repack.SIMULATE_CRASH_ENV: "1", "MTP_STUDIO_HOME": str(tmp_path / "home"), "GGML_NO_BACKTRACE": "1"}


@pytest.fixture(scope="module")
def q4(quantized):
    """The hybrid fixture in Q4_0: the type every repacking CPU (AVX2, AVX-512, AMX, ARM) repacks."""
    return quantized("partial", "Q4_0")


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (repack.OVERRIDE_ENV, repack.LLAMA_ARG_ENV)}
    return {**env, **extra}


# ---------------------------------------------------------------- this machine
def test_the_verdict_is_found_once_per_cpu_and_build_and_remembered(tmp_path, monkeypatch):
    monkeypatch.delenv(repack.OVERRIDE_ENV, raising=False)
    monkeypatch.delenv(repack.LLAMA_ARG_ENV, raising=False)
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    repack.forget()
    try:
        assert repack.cached_verdict() is None
        first = repack.verdict()
        assert first.status in ("ran", "crashed") and not first.cached and first.seconds > 0
        assert first.allowed == (first.status == "ran")
        assert first.cpu == repack.cpu_name() and first.cpu
        stored = json.loads((tmp_path / "home" / "cache" / "cpu-repack.json").read_text())
        assert list(stored) == [repack.key()] and stored[repack.key()]["allowed"] is first.allowed
        repack.forget()  # a new process: read, not probed
        again = repack.verdict()
        assert again.cached and again.allowed is first.allowed and again.seconds == 0
        assert repack.verdict() is again  # and then kept for the process's life
    finally:
        repack.forget()


def test_where_the_kernels_run_loads_keep_repacking(q4, monkeypatch):
    """Repacking is the fast path for prompts: a load without the probe keeps it where it works."""
    monkeypatch.delenv(repack.OVERRIDE_ENV, raising=False)
    monkeypatch.delenv(repack.LLAMA_ARG_ENV, raising=False)
    allowed = repack.allowed()
    buffers = BufferLog.attach()
    try:
        lm = load(LoadSpec(q4.path, mtp=MtpSource.INTEGRATED, n_ctx=256, probe=False, fit="off"))
        lm.close()
    finally:
        buffers.detach()
    assert lm.info.extra_bufts is allowed
    assert (lm.info.repack_notice is None) is allowed
    repacked = {buft for part, buft, _ in buffers.lines if part == "weights"} - PLAIN_BUFFERS
    if allowed and "REPACK = 1" in system_info():  # a build with repacked kernels: Q4_0 takes them
        assert repacked
    else:
        assert not repacked


@pytest.mark.parametrize("var,value", [(repack.OVERRIDE_ENV, "off"), (repack.LLAMA_ARG_ENV, "0")])
def test_the_user_can_turn_repacking_off_without_a_probe(var, value, monkeypatch):
    monkeypatch.delenv(repack.OVERRIDE_ENV, raising=False)
    monkeypatch.setenv(var, value)
    v = repack.verdict()
    assert not v.allowed and v.status == "override" and f"{var}={value}" in v.reason
    assert "off on this CPU" in v.notice
    assert repack.llama_server_args() == ["--no-repack"]  # benchmarks start llama-server the same way
    monkeypatch.setenv(repack.OVERRIDE_ENV, "on")
    assert repack.verdict().allowed and repack.llama_server_args() == []


# ------------------------------------------------------- a CPU whose kernels crash
def test_the_probe_child_dies_like_the_crashing_cpu_and_runs_without_repacking(crashing_cpu, tmp_path):
    cmd = [sys.executable, "-m", repack.CHILD_MODULE, "--work", str(tmp_path)]
    on = subprocess.run(cmd, capture_output=True, text=True, env=_env(crashing_cpu), timeout=180)
    assert on.returncode == -signal.SIGILL
    assert json.loads(on.stdout.strip().splitlines()[-1])["stage"].startswith("decoding a")
    off = subprocess.run([*cmd, "--no-repack"], capture_output=True, text=True, env=_env(crashing_cpu), timeout=180)
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout.strip().splitlines()[-1]) == {"stage": "done", "ok": True, "repack": False}


def test_on_a_crashing_cpu_every_load_runs_without_repacking(q4, crashing_cpu):
    """In-process loads without the probe, with it, and on the engine thread, in a child:
    before the verdict, a load without the probe repacked and died."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engine.runtime.repack_crash_child", str(q4.path)],
        capture_output=True,
        text=True,
        env=_env(crashing_cpu),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    v = out["verdict"]
    assert v["allowed"] is False and v["status"] == "crashed" and "SIGILL" in v["reason"]
    assert out["unprobed"]["extra_bufts"] is False and out["unprobed"]["drafted"] > 0
    assert "CPU weight repacking is off on this CPU" in out["unprobed"]["repack_notice"]
    # the load probe never tries what the verdict forbids: no per-model fallback to tell
    assert out["probed"] == {"extra_bufts": False, "fallbacks": []}
    assert set(out["weight_buffers"]) <= PLAIN_BUFFERS and out["weight_buffers"]
    assert out["engine"]["extra_bufts"] is False and out["engine"]["tokens"] > 0


def test_on_a_crashing_cpu_the_commands_run(q4, crashing_cpu):
    """``generate``, a build's smoke test, ``backend detect``, the memory measurement (fit's
    figures) and the self-test as a user types them; the verdict is found by the first and
    read by the rest."""
    gen = mtp_json(
        "generate",
        "--model",
        str(q4.path),
        "--prompt",
        "def add(a, b):",
        "--max-tokens",
        "12",
        "--draft-depth",
        "2",
        env=crashing_cpu,
    )
    assert gen["model"]["extra_bufts"] is False and gen["model"]["fallbacks"] == [] and gen["stats"]["drafted"] > 0
    smoke = mtp_studio("backend", "smoke", "--json", env=crashing_cpu)
    assert smoke.returncode == 0, smoke.stderr
    report = json.loads(smoke.stdout)
    assert report["ok"] and report["repack"]["allowed"] is False and report["repack"]["cached"]
    detect = mtp_studio("backend", "detect", env=crashing_cpu)
    assert "repacking     off: llama.cpp's repacked kernels crashed (SIGILL)" in detect.stdout
    mem = mtp_studio("bench", "memory", str(q4.path), "--ctx", "256", "--json", env=crashing_cpu)
    assert mem.returncode == 0, mem.stderr[-2000:]
    selftest = mtp_studio("--self-test", env=crashing_cpu)
    line = selftest.stdout.strip().splitlines()[-1]
    assert selftest.returncode == 0 and line.startswith("mtp-studio self-test: ok"), (line, selftest.stderr[-2000:])
    assert "CPU weight repacking off" in line


def test_on_a_crashing_cpu_rpc_serve_and_generate_rpc_run(crashing_cpu):
    """The RPC server allocates with its devices' default buffer type (never repacked);
    the worker process that runs a model over RPC loads as the verdict says."""
    from tests.engine.rpc.test_cli import _serve, _stop

    old = {k: os.environ.get(k) for k in crashing_cpu}
    os.environ.update(crashing_cpu)  # rpc serve inherits this process's environment
    try:
        proc, port = _serve()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        from engine.synth.demo import demo_model_path

        out = mtp_json(
            "generate",
            "--model",
            str(demo_model_path()),
            "--prompt",
            "def read_lines(path):",
            "--max-tokens",
            "16",
            "--rpc",
            f"127.0.0.1:{port}",
            env=crashing_cpu,
        )
        assert out["model"]["rpc"] == [f"127.0.0.1:{port}"] and out["model"]["extra_bufts"] is False
        assert out["tokens"] and proc.poll() is None
    finally:
        _stop(proc)


def test_a_crashing_probe_leaves_no_files_behind(crashing_cpu, tmp_path):
    """The quantized copies live in a folder the parent owns: a child killed by the kernels
    cannot clean up after itself."""
    work = tmp_path / "tmp"
    work.mkdir()
    code = "from engine.runtime.llama import repack; v = repack.probe(); print(v.status)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env({**crashing_cpu, "TMPDIR": str(work)}),
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "crashed", proc.stderr[-2000:]
    assert list(work.iterdir()) == []
