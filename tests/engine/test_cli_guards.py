"""The command line refuses what llama.cpp would abort on, and turns bad numbers into
messages (exit 1), never a crash or a traceback."""

from __future__ import annotations

import pytest

from tests.engine.cli_helpers import mtp_json, mtp_studio


@pytest.mark.parametrize(
    "args,message",
    [
        (["--ctx", "1"], "at least 64"),
        (["--ctx", "5"], "at least 64"),
        (["--ctx", "64", "--draft-depth", "100"], "maximum draft depth must be between 0 and 16"),
        (["--temperature", "nan"], "temperature must be a finite number"),
        (["--temperature", "-1"], "temperature must be between 0 and 2"),
        (["--seed", "-5"], "seed must be between 0"),
        (["--stop", "a", "--stop", "b", "--stop", "c", "--stop", "d", "--stop", "e"], "at most 4 stop strings"),
        (["--stop", "x" * 300], "at most 256 characters"),
    ],
)
def test_bad_settings_are_messages_not_crashes(fixtures, args, message):
    r = mtp_studio("generate", "--model", str(fixtures["partial"].path), "--prompt", "hi", "--max-tokens", "4", *args)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr and "GGML_ASSERT" not in r.stderr


def test_seed_minus_one_means_random(fixtures):
    args = (
        "generate",
        "--model",
        str(fixtures["partial"].path),
        "--prompt",
        "hi",
        "--max-tokens",
        "4",
        "--temperature",
        "0.7",
        "--seed",
        "-1",
    )
    a, b = mtp_json(*args), mtp_json(*args)
    # a sampled end token may stop a reply early; the seed is drawn afresh, and reported
    assert 1 <= len(a["tokens"]) <= 4 and a["stats"]["seed"] != b["stats"]["seed"]
    assert all(0 <= s["stats"]["seed"] < 2**64 for s in (a, b))


def test_serve_refuses_a_tiny_context_at_start(fixtures):
    r = mtp_studio("serve", "--model", str(fixtures["partial"].path), "--ctx", "4", "--port", "0", timeout=60)
    assert r.returncode == 1 and "at least 64" in r.stderr


def test_exact_mode_refuses_heads_its_kv_cache_cannot_hold(tmp_path):
    """Exact mode's Q8_0 KV cache needs heads a multiple of 32 wide: a 48-wide model gets
    that explanation, not llama.cpp's "could not create the context"."""
    from dataclasses import replace

    from engine.synth.qwen35 import build_model
    from tests.models import RECIPES

    build_model(replace(RECIPES["full"], head_dim=48, n_embd=192), tmp_path / "h48.gguf")
    proc = mtp_studio(
        "generate", "--model", str(tmp_path / "h48.gguf"), "--prompt", "hi", "--max-tokens", "4", "--exact"
    )
    assert proc.returncode == 1 and "multiple of 32 wide" in proc.stderr and "48 (keys)" in proc.stderr
    ok = mtp_studio("generate", "--model", str(tmp_path / "h48.gguf"), "--prompt", "hi", "--max-tokens", "4")
    assert ok.returncode == 0, ok.stderr
