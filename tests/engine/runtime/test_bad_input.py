"""Bad input is a typed error that says what is wrong — and never aborts the process
(llama.cpp can: files are validated first and risky loads probed in a child)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from engine.errors import (
    GGUFError,
    HeadMismatchError,
    ModelLoadError,
    ModelNotFoundError,
    MtpUnavailableError,
)
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.qwen35 import build_model
from tests.models import RECIPES


def test_missing_file(tmp_path):
    with pytest.raises(ModelNotFoundError, match="not found"):
        load(LoadSpec(tmp_path / "nope.gguf"))


def test_garbage(tmp_path):
    p = tmp_path / "garbage.gguf"
    p.write_bytes(os.urandom(4096))
    with pytest.raises(GGUFError, match="not a GGUF file"):
        load(LoadSpec(p))


def test_empty_file(tmp_path):
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    with pytest.raises(GGUFError, match="empty"):
        load(LoadSpec(p))


@pytest.mark.parametrize("keep", [3, 20, 5000, -1000, -1])
def test_truncated_file(fixtures, tmp_path, keep):
    data = fixtures["full"].path.read_bytes()
    p = tmp_path / "truncated.gguf"
    p.write_bytes(data[:keep])
    with pytest.raises(GGUFError, match="truncated"):
        load(LoadSpec(p))


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(GGUFError, match="folder"):
        load(LoadSpec(tmp_path))


def test_integrated_mtp_without_nextn_layers(fixtures):
    with pytest.raises(MtpUnavailableError, match="no NextN"):
        load(LoadSpec(fixtures["full"].trunk, mtp=MtpSource.INTEGRATED))


def test_external_mtp_without_a_head(fixtures):
    with pytest.raises(MtpUnavailableError, match="head file"):
        load(LoadSpec(fixtures["full"].trunk, mtp=MtpSource.EXTERNAL))


def test_head_only_file_as_target(fixtures):
    with pytest.raises(MtpUnavailableError, match="head only"):
        load(LoadSpec(fixtures["full"].head))


def test_head_without_nextn_layers(fixtures):
    with pytest.raises(MtpUnavailableError, match="no NextN"):
        load(LoadSpec(fixtures["full"].trunk, head=fixtures["partial"].trunk, mtp=MtpSource.EXTERNAL))


def test_head_with_another_vocabulary(fixtures, tmp_path):
    other = replace(RECIPES["full"], n_merges=150)
    build_model(other, tmp_path / "o.gguf", head_path=tmp_path / "mtp-o.gguf")
    with pytest.raises(HeadMismatchError, match="vocabulary"):
        load(LoadSpec(fixtures["full"].trunk, head=tmp_path / "mtp-o.gguf", mtp=MtpSource.EXTERNAL))


def test_head_with_another_hidden_size(fixtures, tmp_path):
    other = replace(RECIPES["full"], n_embd=64, head_dim=16)
    build_model(other, tmp_path / "o.gguf", head_path=tmp_path / "mtp-o.gguf")
    with pytest.raises(HeadMismatchError, match="Hidden size differs: the target has 128, the head 64"):
        load(LoadSpec(fixtures["full"].trunk, head=tmp_path / "mtp-o.gguf", mtp=MtpSource.EXTERNAL))


def test_a_file_llama_cpp_would_abort_on_is_caught_by_the_child_probe(tmp_path):
    """Structurally valid, but llama.cpp asserts (n_expert > LLAMA_MAX_EXPERTS) and
    aborts. The probe's child dies; this process gets a typed error."""
    spec = replace(RECIPES["full"], extra_kv=(("qwen35.expert_count", 100000),))
    build_model(spec, tmp_path / "abort.gguf")
    with pytest.raises(ModelLoadError, match="aborted"):
        load(LoadSpec(tmp_path / "abort.gguf"))


def test_missing_tensor_is_a_load_error_not_a_crash(fixtures, tmp_path):
    """Drop a required tensor by renaming it (same size, still structurally valid)."""
    data = bytearray(fixtures["full"].path.read_bytes())
    i = data.find(b"blk.0.ssm_conv1d.weight")
    data[i : i + 5] = b"blk.x"
    p = tmp_path / "renamed.gguf"
    p.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="llama.cpp rejects"):
        load(LoadSpec(p))
