"""Will it fit: the header-only memory estimate against what llama.cpp really allocates,
the fit verdicts, and loads refused before anything is allocated."""

from __future__ import annotations

import json

import pytest

from benchmarks.models.memlog import BufferLog
from engine.errors import DecodeError, InsufficientMemoryError
from engine.gguf.memory import RUNTIME_BYTES, ModelShape, estimate, logit_rows, pad
from engine.gguf.shards import open_set
from engine.runtime.llama.batch import LOGITS_ALL, Batch
from engine.runtime.llama.context import Context
from engine.runtime.llama.model import Model
from engine.runtime.load.fit import MARGIN_BYTES, DeviceFree, assess
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.dense import DenseSpec, build_dense
from tests.engine.cli_helpers import mtp_studio

GiB = 1 << 30


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """A small all-attention llama-architecture model (every layer keeps a KV cache)."""
    spec = DenseSpec(n_embd=256, n_ff=768, n_layer=4, n_head=4, n_head_kv=2, n_ctx_train=32768, extra_vocab=2000)
    return build_dense(spec, tmp_path_factory.mktemp("dense") / "dense.gguf")


@pytest.fixture
def buffers():
    h = BufferLog.attach()
    yield h
    h.detach()


def _logged(h: BufferLog, part: str) -> list[int]:
    return [n for p, _, n in h.lines if p == part]


def _same(logged: int, estimated: int) -> bool:
    """llama.cpp logs sizes in MiB with two decimals."""
    return abs(logged - estimated) <= 0.005 * (1 << 20)


@pytest.mark.parametrize("n_ctx", [1024, 4096])
def test_kv_and_weights_match_llama_cpp_on_an_attention_model(dense, buffers, n_ctx):
    lm = load(LoadSpec(dense, mtp=MtpSource.OFF, n_ctx=n_ctx, probe=False))
    try:
        est = estimate(ModelShape.of_set(open_set(dense)), n_ctx, mtp=False, depth=lm.max_draft_depth)
        assert _logged(buffers, "kv") == [est.kv_bytes]  # exactly: 4 layers x cells x 2 heads x 128 x 2 B
        assert est.kv_bytes == 4 * pad(n_ctx) * 2 * (64 + 64) * 2
        # one buffer, or two where llama.cpp repacks the weights its CPU kernels read
        # (CPU_REPACK, AMX): the estimate is of the sum
        weights = sum(_logged(buffers, "weights"))
        assert 1 <= len(_logged(buffers, "weights")) <= 2
        assert abs(est.weights_bytes - weights) <= 0.01 * weights + (1 << 20)  # MiB-rounded log line
        (compute,) = _logged(buffers, "compute")
        assert 0.5 * compute <= est.compute_bytes - RUNTIME_BYTES <= 1.6 * compute
        assert lm.info.memory_bytes == lm.info.fit["devices"][0]["need_bytes"] > 0
    finally:
        lm.close()


def test_hybrid_model_kv_recurrent_and_mtp_match_llama_cpp(fixtures, buffers):
    path = fixtures["partial"].path
    depth = 3
    lm = load(LoadSpec(path, mtp=MtpSource.INTEGRATED, n_ctx=2048, max_draft_depth=depth, probe=False))
    try:
        shape = ModelShape.of_set(open_set(path))
        est = estimate(shape, 2048, mtp=True, depth=depth)
        kv_target, kv_mtp = _logged(buffers, "kv")
        assert _same(kv_target, est.kv_bytes)  # only the trunk's attention layers (1 in 4)
        assert shape.recurrent_layers == 3 and sum(1 for x in shape.kv_per_cell if x) == 1
        (rs,) = _logged(buffers, "recurrent")
        assert _same(rs, est.recurrent_bytes)  # (1 + depth) rollback rows
        assert est.recurrent_bytes == 4 * shape.recurrent_floats * (1 + depth) * 3
        # the MTP context: its own KV over the NextN layer, at the same context
        assert kv_mtp == kv_target and est.mtp_bytes > kv_mtp
        assert len(_logged(buffers, "compute")) == 2  # target and MTP contexts
    finally:
        lm.close()


def test_logit_rows_are_what_a_decode_reads(gemma, buffers):
    """n_outputs_max: the compute buffer no longer reserves n_vocab x n_batch floats (512 MiB
    on Gemma 3's 262k vocabulary), and a decode that asks for more rows gets an error
    instead of llama.cpp's abort."""
    model = Model.load(gemma, load_mtp=False)
    try:
        full = Context(model, n_ctx=1024, n_batch=512)
        (big,) = _logged(buffers, "compute")
        buffers.lines.clear()
        ctx = Context(model, n_ctx=1024, n_batch=512, n_outputs=4)
        (small,) = _logged(buffers, "compute")
        assert ctx.n_outputs == 4 and full.n_outputs == 512
        assert big - small >= 4 * model.n_vocab * (512 - 4) * 0.95  # ~508 MiB
        b = Batch(8)
        b.set(list(range(5)), 0, LOGITS_ALL)
        with pytest.raises(DecodeError, match="5 logit rows"):
            ctx.decode(b)
        b.set(list(range(4)), 0, LOGITS_ALL)
        ctx.decode(b)  # four rows: fine
        b.close()
        ctx.close()
        full.close()
    finally:
        model.close()


def _shape(**kw) -> ModelShape:
    base = dict(
        architecture="llama",
        n_vocab=32000,
        n_embd=4096,
        n_ff=14336,
        n_ctx_train=131072,
        n_layer_all=32,
        n_nextn=0,
        kv_per_cell=(8 * 256,) * 32,
        recurrent_layers=0,
        recurrent_floats=0,
        n_masks=1,
        layer_bytes=(200 << 20,) * 32,
        embd_bytes=250 << 20,
        output_bytes=250 << 20,
        other_bytes=0,
    )
    base.update(kw)
    return ModelShape(**base)


def test_verdicts_gpu_partial_cpu_none():
    shape = _shape()  # ~6.9 GB of weights, 128 KiB of KV per token
    host = DeviceFree("host memory", "cpu", 64 * GiB, 60 * GiB)
    big = assess(shape, 8192, [host, DeviceFree("GPU0", "gpu", 24 * GiB, 23 * GiB)], mtp=False)
    assert big.verdict == "gpu" and big.estimate.gpu_layers == 33 and big.max_ctx > 8192
    small = assess(shape, 8192, [host, DeviceFree("GPU0", "gpu", 6 * GiB, 5 * GiB)], mtp=False)
    assert small.verdict == "partial" and 0 < small.estimate.gpu_layers < 33
    assert small.label() == f"partly on the GPU ({small.estimate.gpu_layers} of 33 layers)"
    assert small.needs["GPU0"] <= 5 * GiB - MARGIN_BYTES
    # one more layer would not have fitted
    more = assess(
        shape,
        8192,
        [host, DeviceFree("GPU0", "gpu", 6 * GiB, 5 * GiB)],
        mtp=False,
        n_gpu_layers=small.estimate.gpu_layers + 1,
    )
    assert more.verdict == "none"
    cpu = assess(shape, 8192, [host], mtp=False)
    assert cpu.verdict == "cpu" and cpu.estimate.offloaded_bytes == 0
    tiny = assess(shape, 8192, [DeviceFree("host memory", "cpu", 8 * GiB, 4 * GiB)], mtp=False)
    assert tiny.verdict == "none" and tiny.max_ctx == 0 and "smaller quantization" in tiny.refusal()


def test_logit_rows_follow_the_vocabulary_and_every_slot_reserves_its_own():
    """A small vocabulary gets wide verifies (suffix drafts to 63 tokens) within 32 MiB a
    sequence; a huge one keeps the 16 rows a grammar's forced run needs; with slots the
    fit counts every sequence's rows."""
    assert logit_rows(3, 32000) == 64 and logit_rows(3, 262144) == 32 and logit_rows(3, 1 << 20) == 16
    assert logit_rows(3) == 16 and logit_rows(40, 262144) == 41
    shape = _shape(n_vocab=262144)
    host = DeviceFree("host memory", "cpu", 64 * GiB, 60 * GiB)
    one = assess(shape, 8192, [host], mtp=False).estimate
    four = assess(shape, 8192, [host], mtp=False, n_seq=4).estimate
    assert four.total_bytes - one.total_bytes == 4 * 262144 * 32 * 3


def test_largest_context_that_fits_is_the_boundary():
    shape = _shape()
    host = DeviceFree("host memory", "cpu", 16 * GiB, 12 * GiB)
    f = assess(shape, 131072, [host], mtp=False)
    assert f.verdict == "none" and f.max_ctx % 256 == 0
    at_max = estimate(shape, f.max_ctx, mtp=False)
    beyond = estimate(shape, f.max_ctx + 256, mtp=False)
    assert at_max.total_bytes <= host.room < beyond.total_bytes
    assert f"Context {f.max_ctx} fits" in f.refusal()


def test_refusal_before_anything_is_allocated(dense, buffers, monkeypatch):
    monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", "1.1G")
    with pytest.raises(InsufficientMemoryError) as e:
        load(LoadSpec(dense, mtp=MtpSource.OFF, n_ctx=1 << 20))  # probe on: refused before the child too
    msg = str(e.value)
    assert "needs" in msg and "at context 32768" in msg and "1.1 GiB free" in msg and "fits" in msg
    assert e.value.fit["verdict"] == "none"
    assert buffers.lines == []  # llama.cpp allocated nothing
    # "shrink" lowers the context to what fits; "off" is the user's override
    lm = load(LoadSpec(dense, mtp=MtpSource.OFF, n_ctx=1 << 20, fit="shrink", probe=False))
    try:
        assert lm.info.n_ctx == lm.info.max_ctx_fits < 32768 and lm.info.n_ctx_requested == 1 << 20
    finally:
        lm.close()


def test_cli_refuses_with_exit_status_1_and_inspect_reports_memory(dense, monkeypatch):
    monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", "1.1G")
    p = mtp_studio("generate", "--model", str(dense), "--ctx", "32768", "--max-tokens", "2", "--prompt", "hi")
    assert p.returncode == 1 and "needs" in p.stderr and "Context" in p.stderr and "fits" in p.stderr
    p = mtp_studio("generate", "--model", str(dense), "--max-tokens", "2", "--prompt", "hi")
    assert p.returncode == 0 and "mtp-studio: context 4096 (" in p.stderr
    out = json.loads(mtp_studio("inspect", str(dense), "--json", "--ctx", "8192", check=True).stdout)
    mem = out["memory"]
    parts = ("weights_bytes", "kv_bytes", "recurrent_bytes", "mtp_bytes", "compute_bytes")
    assert mem["total_bytes"] == sum(mem[k] for k in parts) and mem["kv_bytes"] == 4 * 8192 * 2 * 128 * 2
    assert out["fit"]["devices"][0]["name"] == "host memory" and out["fit"]["devices"][0]["free_bytes"] == int(
        1.1 * (1 << 30)
    )
    assert "memory " in mtp_studio("inspect", str(dense), check=True).stdout


def test_serve_chooses_a_context_that_fits_and_says_so(dense):
    """Without --ctx, serve lowers its default context to the largest that fits; an
    explicit --ctx that does not fit is refused with exit status 1."""
    import os
    import signal
    import subprocess
    import sys

    shape = ModelShape.of_set(open_set(dense))
    room = estimate(shape, 2048, mtp=False).total_bytes  # a machine where exactly 2048 fits
    env = dict(os.environ, GGML_NO_BACKTRACE="1", MTP_STUDIO_HOST_MEMORY=str(room + MARGIN_BYTES))
    cmd = [sys.executable, "-m", "app.launcher", "serve", "--model", str(dense), "--port", "0", "--mtp", "off"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert "serving dense" in lines[0], lines
    assert any(ln.startswith("context 2048: lowered from 4096, the largest that fits memory") for ln in lines), lines
    p = subprocess.run([*cmd, "--ctx", "32768"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and "at context 32768" in p.stderr and "Context 2048 fits" in p.stderr


def test_a_bad_memory_override_is_a_clear_error(dense, monkeypatch):
    from engine.errors import InvalidSettingError

    monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", "lots")
    with pytest.raises(InvalidSettingError, match="MTP_STUDIO_HOST_MEMORY.*16G"):
        load(LoadSpec(dense, mtp=MtpSource.OFF, n_ctx=1024, probe=False))
