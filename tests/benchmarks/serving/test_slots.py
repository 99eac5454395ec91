"""``mtp-studio bench slots`` (benchmarks/serving/slots.py): concurrent clients against this app's
endpoint in a process of its own, on a tiny fixture (no llama-server here)."""

from __future__ import annotations

import pytest


def test_bench_slots_measures_each_arm_at_each_client_count(fixtures):
    """`bench slots` starts this app's endpoint with slots in a process of its own and
    streams N completions at once per arm and round: every arm has figures at every N."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, GGML_NO_BACKTRACE="1", PATH=os.path.dirname(sys.executable))  # no llama-server here
    cmd = [
        sys.executable,
        "-m",
        "app.launcher",
        "bench",
        "slots",
        "--model",
        str(fixtures["full"].path),
        "--clients",
        "1,2",
        "--arms",
        "auto,off",
        "--tokens",
        "8",
        "--rounds",
        "2",
        "--parallel",
        "2",
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(r["arms"]) == {"ours auto", "ours off"} and r["llama_server"] is None
    for per in r["arms"].values():
        assert set(per) == {"1", "2"}
        for fig in per.values():
            # (a reply of 8 tokens on this tiny fixture may come in one chunk, what gathered while
            # the first went out: then nothing passes between its first text and its last)
            assert len(fig["rounds"]) == 2 and fig["tokens_per_second"] > 0 and fig["per_token_ms_p50"] >= 0
            assert fig["first_token_ms_p50"] > 0
    # auto against off round by round: the ratio of each round's figures, its median
    auto, off = r["arms"]["ours auto"], r["arms"]["ours off"]
    for n in ("1", "2"):
        ratios = sorted(a / b for a, b in zip(auto[n]["rounds"], off[n]["rounds"]))
        # the rounds are printed to 0.1 tok/s: on a slow (busy) machine that rounding moves a ratio by more than 0.002
        assert r["auto_vs_worst_paired"][n] == pytest.approx(sum(ratios) / 2, rel=0.01, abs=0.002)
