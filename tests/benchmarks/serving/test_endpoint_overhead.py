"""``mtp-studio bench server`` (benchmarks/serving/endpoint_overhead.py): the endpoint against the
in-process engine, on a tiny fixture."""

from __future__ import annotations


def test_bench_server_runs_on_the_base_install(fixtures, tmp_path):
    """`bench server` speaks HTTP with the standard library: it runs where the test
    extra's HTTP clients cannot be imported."""
    import json
    import os
    import subprocess
    import sys

    blocked = tmp_path / "blocked"
    for mod in ("httpx", "httpx2", "openai"):
        (blocked / mod).mkdir(parents=True)
        (blocked / mod / "__init__.py").write_text(f"raise ImportError('{mod} is not installed')\n")
    env = dict(os.environ, GGML_NO_BACKTRACE="1", PYTHONPATH=os.pathsep.join([str(blocked), os.getcwd()]))
    cmd = [
        sys.executable,
        "-m",
        "app.launcher",
        "bench",
        "server",
        "--model",
        str(fixtures["full"].path),
        "--max-tokens",
        "8",
        "--requests",
        "2",
        "--clients",
        "1,2",
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["requests"] == 2 and r["concurrent"]["2"]["tokens"] == 16 and r["tokens_per_second_http"] > 0
