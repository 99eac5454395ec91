"""The commands a user types: `rpc serve` on each machine, then `generate --rpc` (and `rpc
devices`, `backend plan --rpc`), as real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from engine.rpc.endpoints import Endpoint, hello
from engine.synth.demo import demo_model_path
from tests.engine.cli_helpers import mtp_json, mtp_studio
from tests.engine.rpc.conftest import free_port


def _serve(*args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.launcher", "rpc", "serve", "--port", str(port), "--threads", "1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, GGML_NO_BACKTRACE="1"),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            hello(Endpoint("127.0.0.1", port), timeout=1)
            return proc, port
        except Exception:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("rpc serve did not come up")


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    return err


@pytest.fixture(scope="module")
def two_servers():
    procs = [_serve(), _serve()]
    yield [p for _, p in procs]
    for proc, _ in procs:
        _stop(proc)


def test_generate_with_rpc_from_the_command_line(two_servers):
    rpc = ",".join(f"127.0.0.1:{p}" for p in two_servers)
    common = ["generate", "--model", str(demo_model_path()), "--prompt", "def read_lines(path):", "--max-tokens", "48"]
    local = mtp_json(*common, "--mtp", "off")
    pooled = mtp_json(*common, "--rpc", rpc, "--draft-depth", "auto")
    assert pooled["model"]["rpc"] == rpc.split(",")
    layers = [d["layers"] for d in pooled["model"]["placement"]["devices"]]
    assert sorted(layers) == [1, 1, 2]  # by free memory: one machine's memory, reported three times
    assert pooled["stats"]["drafted"] > 0
    assert pooled["tokens"] == local["tokens"]  # (identity within noise is pinned in test_pool; here the demo is equal)
    split = mtp_json(*common, "--rpc", rpc, "--tensor-split", "0,1,3")
    assert [d["layers"] for d in split["model"]["placement"]["devices"]] == [0, 1, 3]
    text = mtp_studio(*common, "--rpc", rpc)
    assert text.returncode == 0 and "layers: RPC" in text.stderr and "MTP head and output on CPU" in text.stderr


def test_rpc_devices_lists_memory_and_placement(two_servers):
    rpc = ",".join(f"127.0.0.1:{p}" for p in two_servers)
    out = mtp_studio("rpc", "devices", "--rpc", rpc, "--model", str(demo_model_path()))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("RPC0") and f"127.0.0.1:{two_servers[0]}" in lines[0] and "GiB free" in lines[0]
    assert "this machine" in lines[2] and "MTP head and output layer: CPU" in lines[3]


def test_bad_rpc_lists_are_usage_errors():
    common = ["generate", "--model", str(demo_model_path()), "--prompt", "x", "--max-tokens", "2"]
    bad = mtp_studio(*common, "--rpc", "localhost")
    assert bad.returncode == 2 and "host:port" in bad.stderr
    port = free_port()
    down = mtp_studio(*common, "--rpc", f"127.0.0.1:{port}")
    assert down.returncode == 1 and f"Cannot reach RPC server 127.0.0.1:{port}" in down.stderr
    assert "Traceback" not in down.stderr and "GGML" not in down.stderr


def test_serving_other_machines_needs_allow_network_and_warns():
    refused = mtp_studio("rpc", "serve", "--host", "0.0.0.0", "--port", str(free_port()))
    assert refused.returncode == 2 and "--allow-network" in refused.stderr and "no authentication" in refused.stderr
    proc, port = _serve("--host", "0.0.0.0", "--allow-network")
    err = _stop(proc)
    assert "WARNING" in err and "no authentication" in err and f"0.0.0.0:{port}" in err


def test_a_port_in_use_is_a_clear_error(two_servers):
    busy = mtp_studio("rpc", "serve", "--port", str(two_servers[0]))
    assert busy.returncode == 1 and f"Cannot listen on 127.0.0.1:{two_servers[0]}" in busy.stderr


def test_backend_plan_shows_rpc():
    out = mtp_studio("backend", "plan", "--rpc")
    assert out.returncode == 0 and "-DGGML_RPC=ON" in out.stdout and "+ RPC" in out.stdout


def test_bench_runs_in_the_worker_over_rpc(two_servers):
    rpc = ",".join(f"127.0.0.1:{p}" for p in two_servers)
    body = mtp_json(
        "bench", "--model", str(demo_model_path()), "--rpc", rpc, "--depths", "0,2", "--runs", "1", "--max-tokens", "24"
    )
    arms = {a["depth"]: a for a in body["arms"]}
    assert arms["2"]["tokens_per_second_median"] > 0 and arms["2"]["acceptance"] > 0
    assert body["identical"] is not False
