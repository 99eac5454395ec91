"""Write a trained :class:`training.model.Qwen35` as a qwen35 GGUF with an integrated NextN
(MTP) layer, through the same writer as the project's synthetic models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.synth.qwen35 import DType, Qwen35Spec, TensorData, write_gguf
from engine.synth.tokenizer import BpeVocab
from training.model import Block, DeltaNet, GatedAttention, Qwen35


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy().copy()


def _block(p: str, blk: Block, dt: DType) -> list[TensorData]:
    out = [
        TensorData(p + "attn_norm.weight", _np(blk.attn_norm.weight), "f32"),
        TensorData(p + "post_attention_norm.weight", _np(blk.post_norm.weight), "f32"),
    ]
    m = blk.mixer
    if isinstance(m, DeltaNet):
        out += [
            TensorData(p + "attn_qkv.weight", _np(m.qkv.weight), dt),
            TensorData(p + "attn_gate.weight", _np(m.gate.weight), dt),
            TensorData(p + "ssm_conv1d.weight", _np(m.conv), "f32"),
            TensorData(p + "ssm_dt.bias", _np(m.dt_bias), "f32"),
            TensorData(p + "ssm_a", _np(-m.a_log.exp()), "f32"),
            TensorData(p + "ssm_beta.weight", _np(m.beta.weight), dt),
            TensorData(p + "ssm_alpha.weight", _np(m.alpha.weight), dt),
            TensorData(p + "ssm_norm.weight", _np(m.norm.weight), "f32"),
            TensorData(p + "ssm_out.weight", _np(m.out.weight), dt),
        ]
    else:
        assert isinstance(m, GatedAttention)
        out += [
            TensorData(p + "attn_q.weight", _np(m.q.weight), dt),
            TensorData(p + "attn_k.weight", _np(m.k.weight), dt),
            TensorData(p + "attn_v.weight", _np(m.v.weight), dt),
            TensorData(p + "attn_output.weight", _np(m.o.weight), dt),
            TensorData(p + "attn_q_norm.weight", _np(m.q_norm.weight), "f32"),
            TensorData(p + "attn_k_norm.weight", _np(m.k_norm.weight), "f32"),
        ]
    out += [
        TensorData(p + "ffn_gate.weight", _np(blk.ffn.gate.weight), dt),
        TensorData(p + "ffn_up.weight", _np(blk.ffn.up.weight), dt),
        TensorData(p + "ffn_down.weight", _np(blk.ffn.down.weight), dt),
    ]
    return out


def spec_for(model: Qwen35, *, name: str, dtype: DType, extra_kv: tuple = ()) -> Qwen35Spec:
    c = model.c
    return Qwen35Spec(
        name=name,
        n_embd=c.n_embd,
        n_ff=c.n_ff,
        n_trunk=c.n_trunk,
        full_attention_interval=c.full_attention_interval,
        n_head=c.n_head,
        n_head_kv=c.n_head_kv,
        head_dim=c.head_dim,
        ssm_state=c.ssm_state,
        ssm_groups=c.ssm_heads,
        ssm_v_heads=c.ssm_heads,
        ssm_conv=c.ssm_conv,
        n_ctx_train=c.n_ctx_train,
        dtype=dtype,
        n_rot=c.head_dim,
        rope_sections=c.rope_sections,
        rope_base=c.rope_base,
        norm_eps=c.norm_eps,
        extra_kv=extra_kv,
    )


def export(model: Qwen35, vocab: BpeVocab, out: Path, *, name: str, dtype: DType = "f32", extra_kv: tuple = ()) -> Path:
    """Write ``out`` (temp file + rename) and return it."""
    if len(vocab.tokens) != model.c.n_vocab:
        raise ValueError(f"vocabulary has {len(vocab.tokens)} tokens, the model {model.c.n_vocab}")
    c, dt = model.c, dtype
    tensors = [
        TensorData("token_embd.weight", _np(model.embed.weight), dt),
        TensorData("output_norm.weight", _np(model.output_norm.weight), "f32"),
        TensorData("output.weight", _np(model.output.weight), dt),
    ]
    for il, blk in enumerate(model.blocks):
        tensors += _block(f"blk.{il}.", blk, dt)
    p = f"blk.{c.n_trunk}."
    mtp = model.mtp
    tensors += _block(p, mtp.block, dt)
    tensors += [
        TensorData(p + "nextn.eh_proj.weight", _np(mtp.eh_proj.weight), dt),
        TensorData(p + "nextn.enorm.weight", _np(mtp.enorm.weight), "f32"),
        TensorData(p + "nextn.hnorm.weight", _np(mtp.hnorm.weight), "f32"),
        TensorData(p + "nextn.shared_head_norm.weight", _np(mtp.head_norm.weight), "f32"),
    ]
    spec = spec_for(model, name=name, dtype=dtype, extra_kv=extra_kv)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(out, spec, vocab, tensors, block_count=c.n_trunk + 1, nextn=1)
    return out
