"""The training pipeline's CI smoke run: a few steps of a tiny model, export, and parity
with llama.cpp (tokens, logits, and the MTP acceptance of a real speculative run)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from training import pipeline as pl
from training.model import ModelConfig, Qwen35, delta_rule_chunked, delta_rule_recurrent
from training.parity import check, simulate_depth1
from training.train import load_trained

SMOKE = pl.PRESETS["smoke"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("train-smoke")
    pl.run_training(out, SMOKE)
    gguf = pl.export_gguf(out, out / "model.gguf", dtype="f32")
    return out, gguf


def test_chunked_delta_rule_is_the_recurrence():
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 2, 3, 70, 16  # T is not a multiple of the chunk
    q, v = torch.randn(B, H, T, D, generator=g), torch.randn(B, H, T, D, generator=g)
    k = torch.nn.functional.normalize(torch.randn(B, H, T, D, generator=g), dim=-1)
    decay, beta = -torch.rand(B, H, T, generator=g) * 2, torch.rand(B, H, T, generator=g)
    ref = delta_rule_recurrent(q, k, v, decay, beta)
    assert torch.allclose(delta_rule_chunked(q, k, v, decay, beta, chunk=16), ref, atol=1e-4)
    assert not torch.allclose(delta_rule_chunked(q, k, v, decay * 2, beta, chunk=16), ref, atol=1e-2)


def test_rope_sections_rotate_every_pair_or_refuse():
    assert ModelConfig(n_vocab=10, head_dim=48).rope_sections == (8, 8, 8, 0)
    with pytest.raises(ValueError, match="unrotated"):
        ModelConfig(n_vocab=10, head_dim=8).rope_sections


def test_simulated_rounds_follow_the_decoder():
    agree = np.array([True, False, True, True, False, True, True, True])
    # 7 tokens from position 1: drafts from t=0 (accepted: 3 emitted), t=2 (accepted: 5),
    # t=4 (rejected: 6); the last token has no room for a draft
    assert simulate_depth1(agree, 1, 7) == (3, 2)
    assert simulate_depth1(np.zeros(20, dtype=bool), 1, 10) == (8, 0)


def test_smoke_training_exports_a_model_llama_cpp_runs_identically(smoke_run):
    out, gguf = smoke_run
    r = pl.parity(out, gguf)
    assert r.ok, r.to_json()
    assert r.tokens_equal and r.greedy_equal and r.drafted > 0
    assert r.max_abs_logit_diff < 1e-3


def test_parity_notices_a_model_that_differs(smoke_run):
    out, gguf = smoke_run
    model, _ = load_trained(out)
    with torch.no_grad():
        model.blocks[0].ffn.down.weight.mul_(3.0)
    r = check(model, pl.tk.load(out / "tokenizer.json"), gguf, pl.PARITY_TEXT)
    assert not r.ok and r.max_abs_logit_diff > 1e-3


def test_tokenizer_matches_llama_cpp_on_awkward_text(smoke_run):
    from engine.runtime.load.loader import LoadSpec, load

    out, gguf = smoke_run
    tok = pl.tk.load(out / "tokenizer.json")
    text = "Ünïcödé — 12345 x=1\r\n\tdon't  WE'LL   <|im_start|>user\n😀 end<|im_end|>\n"
    lm = load(LoadSpec(gguf, n_ctx=256, probe=False))
    try:
        assert lm.model.tokenize(text) == tok.encode(text).ids
    finally:
        lm.close()


def test_resumed_training_equals_an_uninterrupted_run(smoke_run, tmp_path):
    out, _ = smoke_run
    uninterrupted, _ = load_trained(out)
    resumed_dir = tmp_path / "resumed"
    for name in ("tokenizer.json", "train.npy", "held_out.npy", "corpus.json"):
        (resumed_dir / name).parent.mkdir(exist_ok=True)
        (resumed_dir / name).write_bytes((out / name).read_bytes())
    pl.run_training(resumed_dir, SMOKE, minutes=-1)  # the deadline has passed: stops after one step
    paused, state = load_trained(resumed_dir)
    assert state["step"] == 1
    pl.run_training(resumed_dir, SMOKE)
    resumed, state = load_trained(resumed_dir)
    assert state["step"] == SMOKE.train.steps
    for (name, a), (_, b) in zip(uninterrupted.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, b) for a, b in zip(paused.state_dict().values(), resumed.state_dict().values()))


def test_checkpoint_from_other_settings_is_refused(smoke_run, tmp_path):
    out, _ = smoke_run
    other = tmp_path / "other"
    other.mkdir()
    for name in ("tokenizer.json", "train.npy", "held_out.npy", "corpus.json", "checkpoint.pt"):
        (other / name).write_bytes((out / name).read_bytes())
    changed = replace(SMOKE, train=replace(SMOKE.train, lr=SMOKE.train.lr * 2))
    with pytest.raises(ValueError, match="other settings"):
        pl.run_training(other, changed)


def test_smoke_model_learns_something(smoke_run):
    """Six steps move the loss off its starting value (ln V for a uniform guess)."""
    out, _ = smoke_run
    lines = [line for line in (out / "log.jsonl").read_text().splitlines() if '"eval"' in line]
    import json

    ev = json.loads(lines[-1])["eval"]
    assert ev["trunk_loss"] < math.log(SMOKE.vocab_size) and 0.0 <= ev["mtp_agreement"] <= 1.0


def test_model_forward_shapes():
    m = Qwen35(
        ModelConfig(
            n_vocab=50,
            n_embd=32,
            n_ff=64,
            n_trunk=2,
            full_attention_interval=2,
            n_head=2,
            n_head_kv=1,
            head_dim=12,
            ssm_state=8,
            ssm_heads=2,
        )
    )
    lt, lm = m(torch.randint(0, 50, (2, 9)))
    assert lt.shape == (2, 9, 50) and lm.shape == (2, 8, 50)
