"""Benchmark models of realistic size whose draft acceptance is chosen exactly.

Shapes follow a small, deep model (n_embd 512, gated delta-net blocks with a
full-attention block every 4th, FFN 1536, 8k vocabulary, F16; about 24 blocks at 200 MB,
the proportions of e.g. a 135M-parameter model): every matmul costs what it would in a
real model of that size, the MTP block is one block among many as in real models, while the
constructed weights (see :mod:`engine.synth.qwen35`)
make the target a deterministic successor map and the MTP head agree with it on
exactly a fraction ``acceptance`` of the tokens, placed at random — so a speedup can be measured
honestly on a machine with no real model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.synth.qwen35 import Qwen35Spec, build_model, build_vocab

VOCAB = 8192


def _layer_params(spec: Qwen35Spec, attention: bool) -> int:
    d, ff = spec.n_embd, spec.n_ff
    ffn = 3 * d * ff
    if attention:
        hd = spec.head_dim
        return ffn + d * hd * spec.n_head * 2 + 2 * d * hd * spec.n_head_kv + hd * spec.n_head * d
    key_dim, value_dim = spec.ssm_state * spec.ssm_groups, spec.ssm_state * spec.ssm_v_heads
    return ffn + d * (2 * key_dim + value_dim) + d * value_dim + value_dim * d + 2 * d * spec.ssm_v_heads


BYTES_PER_PARAM = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def bench_spec(size_mb: float, acceptance: float, *, seed: int = 7, dtype: str = "f16") -> Qwen35Spec:
    if not 0.0 <= acceptance <= 1.0:
        raise ValueError("acceptance must be between 0 and 1")
    base = Qwen35Spec(
        name=f"benchmark qwen35 ~{size_mb:.0f} MB, draft acceptance {acceptance:.2f} (constructed)",
        weights="constructed",
        seed=seed,
        dtype=dtype,  # type: ignore[arg-type]
        n_embd=512,
        n_ff=1536,
        n_head=8,
        n_head_kv=2,
        head_dim=64,
        ssm_state=64,
        ssm_groups=4,
        ssm_v_heads=8,
        draft_agreement=acceptance,
        draft_pattern="exact",
        trunk_noise=0.05,
        n_ctx_train=32768,
    )

    base_vocab = len(build_vocab(base).tokens)
    spec = replace(base, extra_vocab=max(0, VOCAB - base_vocab))
    d = spec.n_embd
    fixed = 3 * VOCAB * d + _layer_params(spec, True) + 2 * d * d  # embed, output, draft head, MTP block, eh_proj
    per4 = 3 * _layer_params(spec, False) + _layer_params(spec, True)
    target_params = size_mb * 1e6 / BYTES_PER_PARAM[dtype]
    n_trunk = max(4, round(4 * (target_params - fixed) / per4))
    return replace(spec, n_trunk=n_trunk)


def make_bench_model(
    size_mb: float, acceptance: float, out: Path, *, head_out: Path | None = None, seed: int = 7, dtype: str = "f16"
):
    spec = bench_spec(size_mb, acceptance, seed=seed, dtype=dtype)
    trunk = None
    if head_out is not None:
        trunk = out.with_name(out.stem + "-trunk.gguf")
    return build_model(spec, out, trunk_path=trunk, head_path=head_out)
