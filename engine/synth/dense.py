"""A plain all-attention transformer (llama architecture) with random weights.

Shapes only matter here: memory measurements need a wide model whose every layer keeps
a KV cache, which a qwen35 file cannot be (llama.cpp asserts on a hybrid model without
recurrent layers). Its text is noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.synth.qwen35 import Qwen35Spec, build_vocab

ARCH = "llama"


@dataclass(frozen=True)
class DenseSpec:
    name: str = "dense llama"
    n_embd: int = 1024
    n_ff: int = 3072
    n_layer: int = 8
    n_head: int = 16
    n_head_kv: int = 8
    n_ctx_train: int = 131072
    extra_vocab: int = 28000
    seed: int = 0


def build_dense(spec: DenseSpec, path: Path) -> Path:
    """Write ``spec`` as an F16 GGUF at ``path`` (through a temp file)."""
    import gguf

    vocab = build_vocab(Qwen35Spec(extra_vocab=spec.extra_vocab))
    rng = np.random.default_rng(spec.seed)
    head_dim = spec.n_embd // spec.n_head
    kv = spec.n_head_kv * head_dim

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    tmp = path.with_name(path.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    w.add_string("general.name", spec.name)
    w.add_uint32(f"{ARCH}.block_count", spec.n_layer)
    w.add_uint32(f"{ARCH}.context_length", spec.n_ctx_train)
    w.add_uint32(f"{ARCH}.embedding_length", spec.n_embd)
    w.add_uint32(f"{ARCH}.feed_forward_length", spec.n_ff)
    w.add_uint32(f"{ARCH}.attention.head_count", spec.n_head)
    w.add_uint32(f"{ARCH}.attention.head_count_kv", spec.n_head_kv)
    w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{ARCH}.rope.freq_base", 10000.0)
    w.add_uint32(f"{ARCH}.rope.dimension_count", head_dim)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", list(vocab.tokens))
    w.add_array("tokenizer.ggml.token_type", list(vocab.token_types))
    w.add_array("tokenizer.ggml.merges", list(vocab.merges))
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab.special_ids["<|im_end|>"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    n_vocab = len(vocab.tokens)
    ones = np.ones(spec.n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(n_vocab, spec.n_embd))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", mat(n_vocab, spec.n_embd))
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones)
        w.add_tensor(b + "attn_q.weight", mat(spec.n_embd, spec.n_embd))
        w.add_tensor(b + "attn_k.weight", mat(kv, spec.n_embd))
        w.add_tensor(b + "attn_v.weight", mat(kv, spec.n_embd))
        w.add_tensor(b + "attn_output.weight", mat(spec.n_embd, spec.n_embd))
        w.add_tensor(b + "ffn_norm.weight", ones)
        w.add_tensor(b + "ffn_gate.weight", mat(spec.n_ff, spec.n_embd))
        w.add_tensor(b + "ffn_up.weight", mat(spec.n_ff, spec.n_embd))
        w.add_tensor(b + "ffn_down.weight", mat(spec.n_embd, spec.n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path
