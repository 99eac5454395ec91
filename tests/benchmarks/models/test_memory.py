"""``mtp-studio bench memory`` (benchmarks/models/memory.py): the estimate against a load measured in
a child process and llama.cpp's own buffer log."""

from __future__ import annotations

import json

import pytest

from engine.synth.dense import DenseSpec, build_dense
from tests.engine.cli_helpers import mtp_studio


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """A small all-attention llama-architecture model (every layer keeps a KV cache)."""
    spec = DenseSpec(n_embd=256, n_ff=768, n_layer=4, n_head=4, n_head_kv=2, n_ctx_train=32768, extra_vocab=2000)
    return build_dense(spec, tmp_path_factory.mktemp("dense") / "dense.gguf")


def test_bench_memory_prints_estimate_and_measurement(dense, tmp_path):
    # from another folder: the child that loads the model still finds the harness
    p = mtp_studio("bench", "memory", str(dense), "--ctx", "2048", "--json", check=True, cwd=tmp_path)
    (row,) = json.loads(p.stdout.strip().splitlines()[-1])
    assert row["n_ctx"] == 2048 and row["measured_bytes"] > 0
    assert row["llama_cpp_buffers"]["kv"] == row["estimate"]["kv_bytes"]
    assert row["measured_bytes"] > row["llama_cpp_buffers"]["kv"]
    assert row["error"] == round(row["estimate"]["total_bytes"] / row["measured_bytes"] - 1, 4)
