"""The app never dies from llama.cpp: a child loads and decodes first, a crash is
diagnosed and the known-safe fallback taken, settings llama.cpp asserts on are refused.

This machine's CPU may lack AMX (whose repack kernels crash on quantized models), so the
crash is forced at the one true seam: the probe child kills itself with SIGSEGV exactly
where the AMX kernel would (``MTP_STUDIO_PROBE_CRASH``). These tests are of one model's
crash on a machine whose repacked kernels otherwise run (``MTP_STUDIO_REPACK=on``, so they
hold on every CPU); a CPU whose kernels always crash is tests/engine/runtime/test_repack.py's."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
from dataclasses import replace

import pytest

from engine.errors import GGUFError, InvalidSettingError, NativeCrashError
from engine.gguf.validate import validate_path
from engine.runtime import jobs as J
from engine.runtime.engine import Engine
from engine.runtime.llama import repack
from engine.runtime.load.loadcheck import CRASH_ENV, ProbeRequest, check_load
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.qwen35 import build_model
from tests.engine.runtime.helpers import PROMPTS, run
from tests.models import RECIPES


@pytest.fixture
def fresh_copy(fixtures, tmp_path):
    """A copy of the partial-acceptance model (a new file identity: nothing cached)."""
    p = tmp_path / "copy.gguf"
    shutil.copyfile(fixtures["partial"].path, p)
    return p


def test_a_crash_on_first_decode_falls_back_to_repacking_off_and_is_remembered(fresh_copy, monkeypatch):
    monkeypatch.setenv(repack.OVERRIDE_ENV, "on")
    monkeypatch.setenv(CRASH_ENV, "extra-bufts")
    lm = load(LoadSpec(fresh_copy, mtp=MtpSource.INTEGRATED, n_ctx=256))
    try:
        assert lm.info.extra_bufts is False
        (note,) = lm.info.fallbacks
        assert lm.info.fallbacks_found_now
        assert "SIGSEGV" in note and "repacking" in note and "decoding the first tokens" in note
        g = run(lm, PROMPTS[0], 2)  # and it decodes, with MTP
        assert g.tokens and g.stats.drafted > 0
    finally:
        lm.close()
    req = ProbeRequest(str(fresh_copy), None, "integrated", -1, 4)
    again = check_load(req)
    assert again.cached and again.use_extra_bufts is False and again.fallbacks == [note]
    lm = load(LoadSpec(fresh_copy, mtp=MtpSource.INTEGRATED, n_ctx=256))  # said once: known now
    try:
        assert lm.info.fallbacks == (note,) and not lm.info.fallbacks_found_now
    finally:
        lm.close()


def test_a_crash_with_every_setting_is_a_typed_error_and_the_engine_lives_on(fresh_copy, fixtures, monkeypatch):
    monkeypatch.setenv(CRASH_ENV, "always")
    with Engine() as eng:
        h = eng.submit(J.LoadModel(LoadSpec(fresh_copy, n_ctx=256)))
        with pytest.raises(NativeCrashError, match=r"crashed \(SIGSEGV\).*also failed with CPU weight repacking off"):
            h.result(120)
        monkeypatch.delenv(CRASH_ENV)
        info = eng.submit(J.LoadModel(LoadSpec(fixtures["full"].path, n_ctx=256))).result(120)
        assert info.fallbacks == ()
        assert eng.submit(J.Generate(prompt="Hello", max_tokens=4)).result(60).tokens


def test_the_probe_is_cached_per_file_identity(fresh_copy):
    req = ProbeRequest(str(fresh_copy), None, "integrated", -1, 4)
    first = check_load(req)
    assert not first.cached and first.use_extra_bufts is repack.allowed()  # as this machine's verdict
    assert check_load(req).cached
    os.utime(fresh_copy, ns=(1, 1))  # a changed file is probed again
    assert not check_load(req).cached


def test_two_loads_of_the_same_file_run_one_child_probe_and_another_cpu_probes_again(fresh_copy, monkeypatch):
    from engine.runtime.load import loadcheck

    children = []
    real = loadcheck.run_child
    monkeypatch.setattr(loadcheck, "run_child", lambda *a, **kw: children.append(a) or real(*a, **kw))
    spec = LoadSpec(fresh_copy, mtp=MtpSource.INTEGRATED, n_ctx=256)
    for _ in range(2):
        with Engine() as eng:
            eng.submit(J.LoadModel(spec)).result(120)
    assert len(children) == 1
    assert check_load(ProbeRequest(str(fresh_copy), None, "integrated", -1, 4)).cached
    # the same file and build on another CPU (a cache folder shared between machines)
    monkeypatch.setattr(repack, "cpu_name", lambda: "Another CPU 9000")
    check_load(ProbeRequest(str(fresh_copy), None, "integrated", -1, 4))
    assert len(children) == 2


def test_the_probe_child_survives_being_killed_as_a_plain_signal(fresh_copy):
    """What the parent sees of a crash: the stage the child reached is on stdout."""
    cmd = [sys.executable, "-m", "engine.runtime.load.loadcheck_child", str(fresh_copy), "--mtp", "integrated"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, **{CRASH_ENV: "always"}), timeout=120
    )
    assert proc.returncode == -signal.SIGSEGV
    assert '"stage": "decode"' in proc.stdout.strip().splitlines()[-1]


# ------------------------------------------------------------------ parameter guards
@pytest.mark.parametrize("n_ctx", [1, 5, 63, -1])
def test_a_tiny_context_is_refused_before_llama_cpp_sees_it(fixtures, n_ctx):
    with pytest.raises(InvalidSettingError, match="at least 64"):
        load(LoadSpec(fixtures["partial"].path, n_ctx=n_ctx))


@pytest.mark.parametrize("depth", [17, 100])
def test_a_draft_depth_beyond_the_limit_is_refused(fixtures, depth):
    with pytest.raises(InvalidSettingError, match="maximum draft depth must be between 0 and 16"):
        load(LoadSpec(fixtures["partial"].path, n_ctx=64, max_draft_depth=depth))


@pytest.mark.parametrize("bad", [True, 2.5, "64"])
def test_settings_of_the_wrong_type_are_refused(fixtures, bad):
    with pytest.raises(InvalidSettingError, match="whole number"):
        load(LoadSpec(fixtures["partial"].path, n_ctx=bad))


def test_the_deepest_draft_in_the_smallest_context_decodes_to_the_end(fixtures):
    """Depth 16 in a 64-token context: llama.cpp's batch holds the verify batch and the
    recurrent rollback tail, and drafts are clamped near the end of the context."""
    lm = load(LoadSpec(fixtures["full"].path, mtp=MtpSource.INTEGRATED, n_ctx=64, max_draft_depth=16))
    try:
        assert lm.session.target.n_ubatch >= 18
        g = run(lm, PROMPTS[0], 16, max_tokens=2000)  # llama.cpp may pad the context up
        assert g.stop_reason == "context_full" and g.stats.drafted > 0
    finally:
        lm.close()


def test_a_model_trained_for_a_tiny_context_gets_the_minimum(tmp_path):
    p = tmp_path / "tiny-ctx.gguf"
    build_model(replace(RECIPES["full"], n_ctx_train=8), p)
    lm = load(LoadSpec(p, mtp=MtpSource.INTEGRATED, n_ctx=4096))
    try:
        assert lm.session.n_ctx >= 64
        assert run(lm, PROMPTS[2], 3, max_tokens=20).tokens
    finally:
        lm.close()


def test_generate_cli_refuses_a_tiny_context_with_a_message(fixtures):
    from tests.engine.cli_helpers import mtp_studio

    r = mtp_studio("generate", "--model", str(fixtures["partial"].path), "--ctx", "4", "--prompt", "hi")
    assert r.returncode == 1 and "at least 64" in r.stderr and "GGML_ASSERT" not in r.stderr


# ------------------------------------------------------------------------ rope
def _patch_u32(src, dst, key: str, value: int) -> None:
    data = bytearray(src.read_bytes())
    k = key.encode()
    i = data.find(struct.pack("<Q", len(k)) + k)
    assert i >= 0
    at = i + 8 + len(k) + 4  # length, key, value type (u32)
    data[at : at + 4] = struct.pack("<I", value)
    dst.write_bytes(bytes(data))


@pytest.mark.parametrize("n_rot,why", [(15, "odd number"), (64, "only 32 dimensions")])
def test_a_bad_rope_dimension_count_is_caught_by_validate(fixtures, tmp_path, n_rot, why):
    p = tmp_path / "rope.gguf"
    _patch_u32(fixtures["partial"].path, p, "qwen35.rope.dimension_count", n_rot)
    report, _, _ = validate_path(p)
    assert [e.code for e in report.errors] == ["bad_rope_dims"]
    assert why in report.errors[0].message
    with pytest.raises(GGUFError, match="rope.dimension_count"):
        load(LoadSpec(p))
