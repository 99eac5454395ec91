"""Synthetic qwen35 GGUF models with random or constructed weights.

Used by the test fixtures, the bundled demo model and ``mtp-studio bench make-model``.
A qwen35 model is a hybrid trunk (gated delta-net recurrent blocks, a full-attention
block every ``full_attention_interval`` blocks) plus one appended NextN (MTP) block.

Constructed weights make behaviour predictable without training:

* every token embedding ``e_i`` is a random vector of RMS 1, and all trunk output
  projections (``ssm_out``, ``attn_output``, ``ffn_down``) are zero or small noise, so
  the final hidden state is (nearly) ``e_tok`` and the target acts as a bigram model:
  ``output`` row ``t`` is ``sum(e_i for i with successor[i] == t) / sqrt(n_embd)``,
  whose dot product with ``e_i`` is ``sqrt(n_embd)`` for the successor and ~N(0, 1)
  for every other token;
* the NextN block's ``eh_proj`` copies the normalised token embedding and ignores the
  hidden state, and its own ``shared_head_head`` encodes a *draft* successor map, so a
  draft is accepted exactly where the draft map agrees with the target's.

``trunk_noise`` > 0 adds history-dependent noise to the trunk (recurrent state and
attention then matter, so a state-rollback bug changes the output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from engine.synth.tokenizer import SPECIAL_TOKENS, BpeVocab, train_bpe

ARCH = "qwen35"

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

Weights = Literal["random", "constructed"]
DType = Literal["f32", "f16", "q8_0", "q4_0"]


@dataclass(frozen=True)
class Qwen35Spec:
    """Shape and weight recipe of a synthetic qwen35 model."""

    name: str = "synthetic qwen35"
    n_embd: int = 128
    n_ff: int = 256
    n_trunk: int = 4
    full_attention_interval: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    ssm_state: int = 16  # head_k_dim == head_v_dim
    ssm_groups: int = 2  # key heads
    ssm_v_heads: int = 4  # value heads (time_step_rank)
    ssm_conv: int = 4
    n_ctx_train: int = 4096
    dtype: DType = "f32"
    weights: Weights = "random"
    seed: int = 0
    # constructed weights only
    draft_agreement: float = 1.0  # fraction of tokens where the draft map equals the target map
    #: "exact": exactly round(agreement * n) tokens of the cycle agree, at random places
    #: (the acceptance is exact over the cycle, with no periodic pattern that would favour
    #: one depth; benchmarks); "spread": evenly spaced (periodic); "random": independent
    #: per token (every accepted length occurs; tests)
    draft_pattern: Literal["exact", "spread", "random"] = "spread"
    trunk_noise: float = 0.0
    end_chain_at: int | None = None  # cycle index whose successor is <|im_end|> (tests EOG stops)
    sentence: tuple[str, ...] = ()  # demo: after "\n" the model writes these tokens, then <|im_end|>
    draft_sentence_misses: tuple[int, ...] = ()  # demo: sentence positions the draft gets wrong
    extra_vocab: int = 0  # filler tokens to reach a realistic vocabulary size (benchmarks)
    n_merges: int = 180
    chat_template: str | None = CHATML_TEMPLATE
    extra_kv: tuple[tuple[str, object], ...] = field(default=())
    #: rotary dimensions and M-RoPE sections; None: half the head rotated (Qwen3.5's
    #: partial rotary), sections split as the synthetic models always have been
    n_rot: int | None = None
    rope_sections: tuple[int, int, int, int] | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def n_layer_all(self) -> int:
        return self.n_trunk + 1


@dataclass(frozen=True)
class TensorData:
    name: str
    data: np.ndarray
    dtype: DType  # storage type (1-D tensors and ssm_conv1d are always f32)


def build_vocab(spec: Qwen35Spec) -> BpeVocab:
    vocab = train_bpe(n_merges=spec.n_merges, extra_words=spec.sentence)
    if spec.extra_vocab:
        fill = tuple(f"<|filler_{i}|>" for i in range(spec.extra_vocab))
        n_normal = len(vocab.tokens) - len(SPECIAL_TOKENS)
        tokens = vocab.tokens[:n_normal] + fill + vocab.tokens[n_normal:]
        types = vocab.token_types[:n_normal] + (4,) * len(fill) + vocab.token_types[n_normal:]
        vocab = BpeVocab(tokens, types, vocab.merges)
    return vocab


class _Builder:
    def __init__(self, spec: Qwen35Spec, vocab: BpeVocab):
        self.spec = spec
        self.vocab = vocab
        self.rng = np.random.default_rng(spec.seed)
        self.n_vocab = len(vocab.tokens)
        self.key_dim = spec.ssm_state * spec.ssm_groups
        self.value_dim = spec.ssm_state * spec.ssm_v_heads

    # ----------------------------------------------------------------- helpers
    def _rand(self, shape: tuple[int, ...], scale: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def _dense(self, rows: int, cols: int) -> np.ndarray:
        """A weight with ``ne = {cols, rows}`` (numpy shape (rows, cols))."""
        return self._rand((rows, cols), 1.0 / math.sqrt(cols))

    def _norm(self, n: int) -> np.ndarray:
        if self.spec.weights == "constructed":
            return np.ones(n, dtype=np.float32)
        return (1.0 + self._rand((n,), 0.1)).astype(np.float32)

    def _out_proj(self, rows: int, cols: int) -> np.ndarray:
        """Projection writing into the residual stream."""
        if self.spec.weights == "random":
            return self._dense(rows, cols)
        if self.spec.trunk_noise == 0.0:
            return np.zeros((rows, cols), dtype=np.float32)
        return self._rand((rows, cols), self.spec.trunk_noise / math.sqrt(cols))

    # ------------------------------------------------------------------ blocks
    def trunk_block(self, il: int) -> list[TensorData]:
        s, d, dt = self.spec, self.spec.n_embd, self.spec.dtype
        p = f"blk.{il}."
        out = [
            TensorData(p + "attn_norm.weight", self._norm(d), "f32"),
            TensorData(p + "post_attention_norm.weight", self._norm(d), "f32"),
        ]
        if (il + 1) % s.full_attention_interval != 0:
            conv_dim = 2 * self.key_dim + self.value_dim
            out += [
                TensorData(p + "attn_qkv.weight", self._dense(conv_dim, d), dt),
                TensorData(p + "attn_gate.weight", self._dense(self.value_dim, d), dt),
                TensorData(p + "ssm_conv1d.weight", self._rand((conv_dim, s.ssm_conv), 0.5), "f32"),
                TensorData(p + "ssm_dt.bias", self._rand((s.ssm_v_heads,), 0.5), "f32"),
                TensorData(p + "ssm_a", -np.exp(self._rand((s.ssm_v_heads,), 0.5)), "f32"),
                TensorData(p + "ssm_beta.weight", self._dense(s.ssm_v_heads, d), dt),
                TensorData(p + "ssm_alpha.weight", self._dense(s.ssm_v_heads, d), dt),
                TensorData(p + "ssm_norm.weight", self._norm(s.ssm_state), "f32"),
                TensorData(p + "ssm_out.weight", self._out_proj(d, self.value_dim), dt),
            ]
        else:
            out += self._attention(p)
        out += self._ffn(p)
        return out

    def _attention(self, p: str) -> list[TensorData]:
        s, d, dt = self.spec, self.spec.n_embd, self.spec.dtype
        return [
            TensorData(p + "attn_q.weight", self._dense(s.head_dim * s.n_head * 2, d), dt),
            TensorData(p + "attn_k.weight", self._dense(s.head_dim * s.n_head_kv, d), dt),
            TensorData(p + "attn_v.weight", self._dense(s.head_dim * s.n_head_kv, d), dt),
            TensorData(p + "attn_output.weight", self._out_proj(d, s.head_dim * s.n_head), dt),
            TensorData(p + "attn_q_norm.weight", self._norm(s.head_dim), "f32"),
            TensorData(p + "attn_k_norm.weight", self._norm(s.head_dim), "f32"),
        ]

    def _ffn(self, p: str) -> list[TensorData]:
        s, d, dt = self.spec, self.spec.n_embd, self.spec.dtype
        return [
            TensorData(p + "ffn_gate.weight", self._dense(s.n_ff, d), dt),
            TensorData(p + "ffn_up.weight", self._dense(s.n_ff, d), dt),
            TensorData(p + "ffn_down.weight", self._out_proj(d, s.n_ff), dt),
        ]

    # --------------------------------------------------------- constructed maps
    def successor_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """(target successor, draft successor) for every token id; -1 = none."""
        s, vocab = self.spec, self.vocab
        specials = vocab.special_ids
        n_normal = self.n_vocab - len(SPECIAL_TOKENS)
        succ = np.full(self.n_vocab, -1, dtype=np.int64)
        rng = np.random.default_rng(s.seed + 1)

        sentence_ids = [vocab.id_of(w) for w in s.sentence]
        if len(set(sentence_ids)) != len(sentence_ids):
            raise ValueError("sentence tokens must be distinct for a bigram model")
        reserved = set(sentence_ids)
        if sentence_ids:
            newline = vocab.id_of("\n")
            reserved.add(newline)
            chain = [newline] + sentence_ids + [specials["<|im_end|>"]]
            for a, b in zip(chain, chain[1:]):
                succ[a] = b

        cycle = np.array([i for i in rng.permutation(n_normal) if i not in reserved], dtype=np.int64)
        nxt = np.roll(cycle, -1)
        if s.end_chain_at is not None:
            nxt[s.end_chain_at % len(cycle)] = specials["<|im_end|>"]
        succ[cycle] = nxt

        # The draft agrees with the target at an evenly spread fraction of the cycle, so
        # any window of generated tokens sees an acceptance close to draft_agreement.
        draft = succ.copy()
        if s.draft_pattern == "random":
            agree = np.random.default_rng(s.seed + 2).random(len(cycle)) < s.draft_agreement
        elif s.draft_pattern == "exact":
            agree = np.zeros(len(cycle), dtype=bool)
            n_agree = round(s.draft_agreement * len(cycle))
            agree[np.random.default_rng(s.seed + 2).permutation(len(cycle))[:n_agree]] = True
        else:
            k = np.arange(len(cycle))
            agree = np.floor((k + 1) * s.draft_agreement) > np.floor(k * s.draft_agreement)
        for idx in np.nonzero(~agree)[0]:
            tok = cycle[idx]
            wrong = cycle[(idx + 1 + len(cycle) // 2) % len(cycle)]
            draft[tok] = wrong if wrong != succ[tok] else cycle[(idx + 2) % len(cycle)]
        for pos in s.draft_sentence_misses:
            tok = sentence_ids[pos]
            draft[tok] = cycle[pos % len(cycle)]
        return succ, draft

    def _head_matrix(self, emb: np.ndarray, succ: np.ndarray) -> np.ndarray:
        """Rows t = sum of normalised embeddings of t's predecessors."""
        out = np.zeros_like(emb)
        src = np.nonzero(succ >= 0)[0]
        np.add.at(out, succ[src], emb[src])
        return (out / math.sqrt(self.spec.n_embd)).astype(np.float32)

    # -------------------------------------------------------------------- model
    def tensors(self) -> tuple[list[TensorData], list[TensorData], list[TensorData]]:
        """(shared, trunk blocks, nextn block) tensors in GGUF table order."""
        s, d, dt = self.spec, self.spec.n_embd, self.spec.dtype
        emb = self.rng.standard_normal((self.n_vocab, d)).astype(np.float32)
        emb /= np.sqrt(np.mean(emb * emb, axis=1, keepdims=True))  # RMS 1 rows
        if s.weights == "constructed":
            succ, draft = self.successor_maps()
            output = self._head_matrix(emb, succ)
            draft_head = self._head_matrix(emb, draft)
        else:
            output = self._dense(self.n_vocab, d)
            draft_head = None
        shared = [
            TensorData("token_embd.weight", emb, dt),
            TensorData("output_norm.weight", self._norm(d), "f32"),
            TensorData("output.weight", output, dt),
        ]
        trunk = [t for il in range(s.n_trunk) for t in self.trunk_block(il)]

        il = s.n_trunk
        p = f"blk.{il}."
        if s.weights == "constructed":
            eh = np.zeros((d, 2 * d), dtype=np.float32)
            eh[:, :d] = np.eye(d, dtype=np.float32)  # copy normalised token embedding, ignore h
        else:
            eh = self._dense(d, 2 * d)
        nextn = [
            TensorData(p + "attn_norm.weight", self._norm(d), "f32"),
            TensorData(p + "post_attention_norm.weight", self._norm(d), "f32"),
            *self._attention(p),
            *self._ffn(p),
            TensorData(p + "nextn.eh_proj.weight", eh, dt),
            TensorData(p + "nextn.enorm.weight", self._norm(d), "f32"),
            TensorData(p + "nextn.hnorm.weight", self._norm(d), "f32"),
        ]
        if draft_head is not None:
            nextn.append(TensorData(p + "nextn.shared_head_head.weight", draft_head, dt))
        return shared, trunk, nextn


def write_gguf(
    path: Path,
    spec: Qwen35Spec,
    vocab: BpeVocab,
    tensors: list[TensorData],
    *,
    block_count: int,
    nextn: int,
) -> None:
    import gguf

    tmp = path.with_name(path.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    a = ARCH
    w.add_string("general.name", spec.name)
    w.add_uint32("general.alignment", 32)
    w.add_uint32(f"{a}.block_count", block_count)
    w.add_uint32(f"{a}.context_length", spec.n_ctx_train)
    w.add_uint32(f"{a}.embedding_length", spec.n_embd)
    w.add_uint32(f"{a}.feed_forward_length", spec.n_ff)
    w.add_uint32(f"{a}.attention.head_count", spec.n_head)
    w.add_uint32(f"{a}.attention.head_count_kv", spec.n_head_kv)
    w.add_uint32(f"{a}.attention.key_length", spec.head_dim)
    w.add_uint32(f"{a}.attention.value_length", spec.head_dim)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", spec.norm_eps)
    w.add_float32(f"{a}.rope.freq_base", spec.rope_base)
    n_rot = spec.n_rot or spec.head_dim // 2
    w.add_uint32(f"{a}.rope.dimension_count", n_rot)
    half = n_rot // 2
    sections = spec.rope_sections or (half - 2 * (half // 4), half // 4, half // 4, 0)
    w.add_array(f"{a}.rope.dimension_sections", list(sections))
    w.add_uint32(f"{a}.ssm.conv_kernel", spec.ssm_conv)
    w.add_uint32(f"{a}.ssm.state_size", spec.ssm_state)
    w.add_uint32(f"{a}.ssm.group_count", spec.ssm_groups)
    w.add_uint32(f"{a}.ssm.time_step_rank", spec.ssm_v_heads)
    w.add_uint32(f"{a}.ssm.inner_size", spec.ssm_state * spec.ssm_v_heads)
    w.add_uint32(f"{a}.full_attention_interval", spec.full_attention_interval)
    recurrent = [(i < spec.n_trunk) and ((i + 1) % spec.full_attention_interval != 0) for i in range(block_count)]
    w.add_array(f"{a}.attention.recurrent_layers", recurrent)
    if nextn:
        w.add_uint32(f"{a}.nextn_predict_layers", nextn)
    for key, value in spec.extra_kv:
        add_any(w, key, value)

    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", list(vocab.tokens))
    w.add_array("tokenizer.ggml.token_type", list(vocab.token_types))
    w.add_array("tokenizer.ggml.merges", list(vocab.merges))
    specials = vocab.special_ids
    w.add_uint32("tokenizer.ggml.eos_token_id", specials["<|im_end|>"])
    w.add_uint32("tokenizer.ggml.padding_token_id", specials["<|endoftext|>"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    if spec.chat_template is not None:
        w.add_string("tokenizer.chat_template", spec.chat_template)

    for t in tensors:
        data = t.data
        if t.dtype == "f16":
            w.add_tensor(t.name, data.astype(np.float16))
        elif t.dtype in _QUANTS and data.ndim == 2 and data.shape[-1] % 32 == 0:
            qtype = getattr(gguf.GGMLQuantizationType, _QUANTS[t.dtype])
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(t.name, data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


_QUANTS = {"q8_0": "Q8_0", "q4_0": "Q4_0"}


def add_any(w, key: str, value: object) -> None:
    """Add one KV to a gguf-py writer by its Python type (int: uint32, float: float32)."""
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    else:
        w.add_array(key, list(value))  # type: ignore[arg-type]


@dataclass(frozen=True)
class BuiltModel:
    """Paths written by :func:`build_model` and the maps behind constructed weights."""

    integrated: Path
    trunk: Path | None
    head: Path | None
    vocab: BpeVocab
    successor: np.ndarray | None
    draft_successor: np.ndarray | None


def build_model(
    spec: Qwen35Spec,
    out: Path,
    *,
    trunk_path: Path | None = None,
    head_path: Path | None = None,
) -> BuiltModel:
    """Write the integrated model to ``out``; optionally also the same weights split into a
    trunk-only file (no NextN layer, as ``convert_hf_to_gguf.py --no-mtp`` writes) and a
    head-only file (full metadata + token_embd/output_norm/output + the NextN block, as
    ``--mtp`` writes)."""
    vocab = build_vocab(spec)
    b = _Builder(spec, vocab)
    shared, trunk, nextn = b.tensors()
    write_gguf(out, spec, vocab, shared + trunk + nextn, block_count=spec.n_layer_all, nextn=1)
    if trunk_path is not None:
        write_gguf(trunk_path, spec, vocab, shared + trunk, block_count=spec.n_trunk, nextn=0)
    if head_path is not None:
        head_spec = replace(spec, name=spec.name + " (MTP head)")
        write_gguf(head_path, head_spec, vocab, shared + nextn, block_count=spec.n_layer_all, nextn=1)
    succ, draft = b.successor_maps() if spec.weights == "constructed" else (None, None)
    return BuiltModel(out, trunk_path, head_path, vocab, succ, draft)
