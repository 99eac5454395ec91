"""Tiny GGUF models of every MTP family, for tests: a trunk with its NextN (MTP) blocks,
split heads, and Gemma 4 with an assistant.

Hyperparameters are those of the vendored ``tests/test-llama-archs.cpp`` (``get_gguf_ctx``,
the shapes llama.cpp's own CI loads for every architecture), with NextN blocks appended.
Which tensors a family has, and their shapes, is asked of llama.cpp itself: the metadata is
written with gguf-py, ``llama_model_init_from_user`` builds the model from it (with
``load_mtp``, so NextN tensors are created too), and the layout it reports is written back
with gguf-py, with weights of our choosing. No tensor list per family is kept here, so the
fixtures follow llama.cpp's loaders exactly.

Weights are constructed so that drafts get accepted: token embeddings are random with RMS 1
and everything a block adds is small noise, so the trunk's last hidden state is close to
its input token's embedding and the target acts as a bigram model (``output``, random,
picks the successor). Each NextN block's ``eh_proj`` copies the normalised embedding of
its input token, so the head predicts the same successor map. ``noise`` sets how much the
blocks add: more noise, less acceptance.

Building the layout runs llama.cpp on metadata, which can abort the process on a bad
shape: call :func:`write_all` in a child process (``python -m engine.synth.families DIR``).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.synth.qwen35 import CHATML_TEMPLATE, add_any
from engine.synth.tokenizer import train_bpe


N_CTX = 256


@dataclass(frozen=True)
class Fixture:
    """One family's files: ``target`` (integrated unless the family only ships heads apart),
    and where it ships a head apart, ``trunk`` and ``head``."""

    family: str
    arch: str
    n_nextn: int
    files: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------ metadata
def _dims(arch: str) -> tuple[int, int, int, int]:
    """(n_embd, n_head, n_ff, n_layer) as test-llama-archs picks them."""
    if arch == "gemma4":
        return 128, 2, 192, 5
    if arch == "deepseek4":
        return 512, 8, 1024, 4
    if arch == "step35":
        return 160, 2, 384, 2
    if arch in ("deepseek2", "deepseek32", "glm-dsa", "bailingmoe3", "glm5-next"):
        return 128, 1, 192, 2
    if arch in ("nemotron_h", "nemotron_h_moe"):
        return 256, 2, 384, 3
    return 256, 2, 384, 2


def arch_kvs(arch: str, n_vocab: int, *, nextn: int, moe: bool = True) -> dict[str, object]:
    """``{key: value}`` for one family: test-llama-archs' keys (a superset; each
    architecture reads what it needs), per-layer arrays sized for the NextN blocks too."""
    n_embd, n_head, n_ff, n_layer = _dims(arch)
    bc = n_layer + nextn
    head = n_embd // n_head
    mla = arch in ("deepseek2", "deepseek32", "glm-dsa", "bailingmoe3", "glm5-next")
    kv: dict[str, object] = {}

    def a(key: str, value: object) -> None:
        kv[f"{arch}.{key}"] = value

    a("vocab_size", n_vocab)
    a("context_length", N_CTX)
    a("embedding_length", n_embd)
    a("features_length", n_embd)
    a("block_count", bc)
    a("leading_dense_block_count", 1)
    if nextn:
        a("nextn_predict_layers", nextn)
    if arch in ("nemotron_h", "nemotron_h_moe"):
        a("feed_forward_length", [0 if il <= 1 else n_ff for il in range(bc)])
    else:
        a("feed_forward_length", n_ff)
    a("use_parallel_residual", False)
    a("logit_scale", 1.0)
    a("full_attention_interval", 2)
    if arch in ("nemotron_h", "nemotron_h_moe", "bailingmoe3", "glm5-next"):
        per = [0 if il == 1 else n_head for il in range(bc)]
        a("attention.head_count", n_head if arch == "glm5-next" else per)
        a("attention.head_count_kv", per)
    else:
        a("attention.head_count", n_head)
        a("attention.head_count_kv", 1 if arch == "deepseek4" else n_head)
    if arch == "deepseek4":
        a("attention.key_length", head)
        a("attention.value_length", head)
        a("rope.dimension_count", head // 2)
    elif mla:
        a("attention.key_length", 512 if arch == "glm5-next" else 576)
        a("attention.value_length", 512)
        a("rope.dimension_count", 0 if arch == "glm5-next" else 64)
        a("attention.key_length_mla", 192)
        a("attention.value_length_mla", 128)
    a("attention.clamp_kqv", 1.0)
    a("attention.layer_norm_epsilon", 1e-5)
    a("attention.layer_norm_rms_epsilon", 1e-5)
    a("attention.group_norm_epsilon", 1e-5)
    a("attention.group_norm_groups", 8)
    a("attention.q_lora_rank", 64 if arch == "deepseek4" else 512)
    a("attention.kv_lora_rank", 512)
    a("attention.sliding_window", N_CTX // 8)
    if arch == "gemma4":
        a("embedding_length_per_layer_input", n_embd // 2)
        a("attention.shared_kv_layers", 0)
        a("attention.key_length_swa", head)
        a("attention.value_length_swa", head)
        a("rope.freq_base_swa", 10000.0)
        a("attention.sliding_window_pattern", [il % 5 < 4 for il in range(bc)])  # every 5th block full
    elif arch in ("cohere2moe", "mimo2", "step35"):
        a("attention.sliding_window_pattern", [il % 2 == 1 for il in range(bc)])
    else:
        a("attention.sliding_window_pattern", 2)
    if arch == "glm5-next":
        a("hyper_connection.count", 4)
        a("hyper_connection.sinkhorn_iterations", 2)
        a("hyper_connection.epsilon", 1e-6)
        a("hyper_connection.low_rank", 8)
        a("attention.compress_ratios", [4] * bc)
        a("ple.layers", [0])
        a("ple.ngram_size", 3)
        a("ple.heads_per_ngram", 2)
        a("ple.conv_kernel", 4)
        a("ple.eos_token_id", 0)
        a("embedding_length_per_layer_input", n_embd // 4)
        a("ple.layer_multipliers", [1, 3, 5])
        a("ple.head_offsets", [h * n_vocab for h in range(4)])
        a("ple.head_vocab_sizes", [n_vocab] * 4)
    a("attention.indexer.head_count", 64)
    a("attention.indexer.key_length", 128)
    a("attention.indexer.top_k", 131072)
    a("attention.indexer.block_size", 4)
    a("attention.indexer.kpool", 4)
    a("attention.indexer.kpool_select_tail", True)
    a("attention.indexer.local_blocks", 1)
    if arch == "bailingmoe3":
        a("rope.dimension_sections", [8, 12, 12, 0])
    elif arch in ("qwen35", "qwen35moe", "qwen3next"):
        a("rope.dimension_sections", [head // 4] * 4)
    if arch == "deepseek4":
        a("attention.output_group_count", 8)
        a("attention.output_lora_rank", 32)
        a("attention.compress_ratios", ([0, 0, 4, 128] + [0] * nextn)[:bc])
        a("attention.compress_rope_freq_base", 160000.0)
        a("hyper_connection.count", 4)
        a("hyper_connection.sinkhorn_iterations", 2)
        a("hyper_connection.epsilon", 1e-6)
        a("hash_layer_count", 0)
        a("swiglu_clamp_exp", 10.0)
        a("expert_weights_scale", 1.0)
        a("expert_weights_norm", True)
    if moe:
        a("expert_feed_forward_length", n_ff)
        a("expert_shared_feed_forward_length", n_ff // 2)
        a("expert_latent_length", n_ff)
        a("interleave_moe_layer_step", 2)
        a("expert_count", 2)
        a("expert_used_count", 2)
        a("expert_shared_count", 1)
        a("expert_gating_func", 4 if arch == "deepseek4" else 2)
        a("expert_group_scale", 1.0)
        a("experts_per_group", 1)
    a("ssm.inner_size", 256 if arch in ("qwen3next", "qwen35", "qwen35moe") else 2 * n_embd)
    a("ssm.conv_kernel", 4)
    a("ssm.state_size", 128)
    a("ssm.time_step_rank", n_head)
    a("ssm.group_count", 2)
    a("kda.head_dim", 128)
    a("kda.safe_gate", True)
    a("kda.gate_lower_bound", -5.0)
    a("time_mix_extra_dim", 64)
    a("time_decay_extra_dim", 128)
    a("wkv.head_size", n_embd // n_head)
    a("shortconv.l_cache", 3)
    a("residual_scale", 3.5565588200778455)
    a("attn_res.block_size", 12)
    a("activation.situ_beta", 4.0)
    a("activation.situ_linear_beta", 25.0)
    if arch == "bailingmoe3":
        a("swiglu_clamp_exp", ([0.0, 4.0] + [4.0] * nextn)[:bc])
        a("swiglu_clamp_shexp", ([0.0, 5.0] + [5.0] * nextn)[:bc])
    return kv


def assistant_kvs(target_n_embd: int, n_vocab: int, n_layer: int = 2) -> dict[str, object]:
    """A Gemma 4 assistant (its own architecture): every block a NextN block, reading the
    target's KV cache; ``embedding_length_out`` is the target's hidden size."""
    arch, n_embd, n_head, head = "gemma4-assistant", 64, 2, 64
    return {
        f"{arch}.vocab_size": n_vocab,
        f"{arch}.context_length": N_CTX,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.embedding_length_out": target_n_embd,
        f"{arch}.block_count": n_layer,
        f"{arch}.nextn_predict_layers": n_layer,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": 1,
        f"{arch}.attention.key_length": head,
        f"{arch}.attention.value_length": head,
        f"{arch}.attention.key_length_swa": head,
        f"{arch}.attention.value_length_swa": head,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.attention.sliding_window": N_CTX // 8,
        f"{arch}.attention.sliding_window_pattern": [il < n_layer - 1 for il in range(n_layer)],
        f"{arch}.rope.freq_base": 1000000.0,
        f"{arch}.rope.freq_base_swa": 10000.0,
        f"{arch}.rope.dimension_count": head,
    }


# ----------------------------------------------------------- llama.cpp layout
@lru_cache(maxsize=1)
def _llama():
    """llama-cpp-python, imported directly: this module sits below the engine's runtime
    (a fixture writer run in a child process of its own), so it sets up what it needs."""
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    import llama_cpp

    llama_cpp.llama_backend_init()
    return llama_cpp


class _TensorHead(ctypes.Structure):
    """The first fields of ``struct ggml_tensor`` (ggml.h): type, buffer, ne[4]."""

    _fields_ = [("type", ctypes.c_int32), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4)]


class _GgufParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


@lru_cache(maxsize=1)
def _ggml_base():
    """ggml's base library beside the libllama in use (gguf_* and ggml_get_name)."""
    L = _llama()
    where = Path(L.llama_cpp._lib._name).parent
    found = sorted(where.glob("libggml-base.*")) or sorted(where.glob("ggml-base.*"))
    if not found:
        raise RuntimeError(f"ggml's base library is not beside libllama in {where}")
    lib = ctypes.CDLL(str(found[0]))
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, _GgufParams]
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_get_name.restype = ctypes.c_char_p
    return lib


def _write(path: Path, arch: str, kvs: dict[str, object], tensors: dict[str, np.ndarray]) -> None:
    import gguf

    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_uint32("general.alignment", 32)
    for key, value in kvs.items():
        add_any(w, key, value)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def layout(arch: str, kvs: dict[str, object], tmp: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor llama.cpp creates for this metadata (MTP layers included), as
    ``{name: ne}`` (ggml order: ne[0] first). Optional tensors are created too (biases,
    ``*.scale``/``*.input_scale``, a NextN block's own embedding and output), so the
    fixtures carry them."""
    L = _llama()
    base = _ggml_base()
    meta = tmp / f"{arch}.meta.gguf"
    _write(meta, arch, kvs, {})
    ctx = base.gguf_init_from_file(str(meta).encode(), _GgufParams(True, None))
    if not ctx:
        raise RuntimeError(f"gguf could not read {meta}")
    found: dict[str, tuple[int, ...]] = {}

    @L.llama_model_set_tensor_data_t
    def record(tensor, _ud):
        head = _TensorHead.from_address(tensor)
        ne = tuple(int(x) for x in head.ne)
        while len(ne) > 1 and ne[-1] == 1:
            ne = ne[:-1]
        found[base.ggml_get_name(tensor).decode()] = ne

    params = L.llama_model_default_params()
    params.load_mtp = True
    params.n_gpu_layers = 0
    model = L.llama_model_init_from_user(ctx, record, None, params)
    base.gguf_free(ctx)
    meta.unlink()
    if not model:
        raise RuntimeError(f"llama.cpp could not build a {arch} model from this metadata")
    L.llama_model_free(model)
    return found


def assistant_layout(kvs: dict[str, object]) -> dict[str, tuple[int, ...]]:
    """The tensors of a Gemma 4 assistant, as ``gemma4-assistant.cpp``'s
    ``load_arch_tensors`` creates them (``llama_model_init_from_user`` cannot build this
    architecture: it runs out of tensor slots), as ``{name: ne}``."""
    a = "gemma4-assistant"
    n_embd, n_vocab, n_out = kvs[f"{a}.embedding_length"], kvs[f"{a}.vocab_size"], kvs[f"{a}.embedding_length_out"]
    n_head, head, n_ff = (
        kvs[f"{a}.attention.head_count"],
        kvs[f"{a}.attention.key_length"],
        kvs[f"{a}.feed_forward_length"],
    )
    swa = kvs[f"{a}.attention.sliding_window_pattern"]
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (n_embd, n_vocab),
        "output_norm.weight": (n_embd,),
        "nextn.post_projection.weight": (n_embd, n_out),
        "nextn.pre_projection.weight": (2 * n_out, n_embd),
    }  # type: ignore[dict-item]
    for i, is_swa in enumerate(swa):  # type: ignore[arg-type]
        b = f"blk.{i}"
        shapes |= {
            f"{b}.attn_norm.weight": (n_embd,),
            f"{b}.attn_q.weight": (n_embd, head * n_head),
            f"{b}.attn_output.weight": (head * n_head, n_embd),
            f"{b}.attn_q_norm.weight": (head,),
            f"{b}.post_attention_norm.weight": (n_embd,),
            f"{b}.layer_output_scale.weight": (1,),
            f"{b}.ffn_norm.weight": (n_embd,),
            f"{b}.ffn_gate.weight": (n_embd, n_ff),
            f"{b}.ffn_up.weight": (n_embd, n_ff),
            f"{b}.ffn_down.weight": (n_ff, n_embd),
            f"{b}.post_ffw_norm.weight": (n_embd,),
        }
        if not is_swa:
            shapes["rope_freqs.weight"] = (head // 2,)
    return shapes  # type: ignore[return-value]


# ------------------------------------------------------------------- weights
def _values(name: str, ne: tuple[int, ...], rng: np.random.Generator, noise: float) -> np.ndarray:
    shape = tuple(reversed(ne))  # numpy order: (rows, columns)
    if name == "token_embd.weight":
        return rng.standard_normal(shape).astype(np.float32)
    if name == "output.weight":  # logits of spread ~8 over unit-RMS hidden states: a clear successor
        return (rng.standard_normal(shape) * (8 / math.sqrt(shape[-1]))).astype(np.float32)
    if "norm" in name or "scale" in name or name.startswith("rope_freqs"):
        return np.ones(shape, np.float32)
    if (".nextn.eh_proj." in name or name.startswith("nextn.pre_projection")) and len(shape) == 2:
        out, inp = shape  # rows: the block's width; columns: [embedding | hidden]
        w = np.zeros(shape, np.float32)
        w[:, : min(out, inp // 2)] = np.eye(out, min(out, inp // 2), dtype=np.float32)
        return w + (rng.standard_normal(shape) * noise).astype(np.float32)
    if "ssm_a" in name:
        return -np.abs(rng.standard_normal(shape)).astype(np.float32)
    if "ssm_d" in name or name.endswith(".bias"):  # ssm_d and ssm_dt
        return np.zeros(shape, np.float32)
    return (rng.standard_normal(shape) * noise).astype(np.float32)


def _weights(shapes: dict[str, tuple[int, ...]], seed: int, noise: float) -> dict[str, np.ndarray]:
    out = {}
    for i, (name, ne) in enumerate(sorted(shapes.items())):
        rng = np.random.default_rng([seed, i])
        out[name] = _values(name, ne, rng, noise)
    for name in out:  # a head's own embedding and output (optional in llama.cpp) equal the trunk's
        if name.endswith(".nextn.embed_tokens.weight") and "token_embd.weight" in out:
            out[name] = out["token_embd.weight"].copy()
        elif name.endswith(".nextn.shared_head_head.weight") and "output.weight" in out:
            out[name] = out["output.weight"].copy()
    return out


def _tokenizer() -> dict[str, object]:
    vocab = train_bpe()
    sp = vocab.special_ids
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": list(vocab.tokens),
        "tokenizer.ggml.token_type": list(vocab.token_types),
        "tokenizer.ggml.merges": list(vocab.merges),
        "tokenizer.ggml.eos_token_id": sp["<|im_end|>"],
        "tokenizer.ggml.padding_token_id": sp["<|endoftext|>"],
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHATML_TEMPLATE,
    }


# ------------------------------------------------------------------- families
#: family name → (architecture, NextN layers); integrated files unless said otherwise
INTEGRATED = {
    "qwen35moe": ("qwen35moe", 1),
    "qwen3next": ("qwen3next", 1),
    "glm4moe": ("glm4moe", 1),
    "deepseek2": ("deepseek2", 1),  # GLM-4.7-Flash: MLA
    "deepseek32": ("deepseek32", 1),
    "glm-dsa": ("glm-dsa", 1),
    "bailingmoe3": ("bailingmoe3", 1),
    "cohere2moe": ("cohere2moe", 1),
    "nemotron_h_moe": ("nemotron_h_moe", 1),
    "step35": ("step35", 3),  # chained heads
    "mimo2": ("mimo2", 2),  # chained heads (fused attn_qkv)
    "hy_v3": ("hy_v3", 2),  # chained heads
    "glm5-next": ("glm5-next", 1),  # loads; no MTP graph
}


#: architectures whose converter writes attention as one fused attn_qkv (and whose MTP
#: graph needs it: a layout from metadata lays out attn_q/k/v instead)
FUSED_QKV = ("mimo2",)


def _fuse_qkv(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Every block's attn_q/k/v weights as one ``attn_qkv.weight`` (their rows stacked),
    their scales dropped (llama.cpp reads none for a fused weight); biases stay apart, as
    ``create_tensor_qkv`` allows."""
    out = dict(shapes)
    for name, ne in shapes.items():
        if name.endswith(".attn_q.weight"):
            b = name.removesuffix(".attn_q.weight")
            parts = [out.pop(f"{b}.attn_{x}.weight") for x in "qkv"]
            out[f"{b}.attn_qkv.weight"] = (ne[0], sum(p[1] for p in parts))
            for x in "qkv":
                for kind in ("scale", "input_scale"):
                    out.pop(f"{b}.attn_{x}.{kind}", None)
    return out


def _split(shapes: dict[str, tuple[int, ...]], n_layer: int) -> tuple[set[str], set[str]]:
    """(trunk tensors, head tensors): the head keeps the NextN blocks and the shared ends."""
    shared = {"token_embd.weight", "output_norm.weight", "output.weight"}
    head, trunk = set(), set()
    for name in shapes:
        if name.startswith("blk."):
            (head if int(name.split(".")[1]) >= n_layer else trunk).add(name)
        else:
            trunk.add(name)
            if name in shared:
                head.add(name)
    return trunk, head


def write_family(
    family: str,
    out: Path,
    *,
    noise: float = 0.02,
    seed: int = 0,
    split: bool = False,
    nextn: int | None = None,
    extra: dict[str, object] | None = None,
    fuse: bool = True,
) -> Fixture:
    """Write one family's fixture into ``out``. ``split``: also as a trunk and an
    ``mtp-`` head; ``nextn`` / ``extra``: other NextN counts or keys, ``fuse=False``:
    mimo2 with separate attn_q/k/v (for refusals)."""
    tok = _tokenizer()
    n_vocab = len(tok["tokenizer.ggml.tokens"])  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    if family == "gemma4":
        return _write_gemma4(out, tok, n_vocab, noise, seed)
    if family == "deepseek4":
        return _write_deepseek4(out, tok, n_vocab, noise, seed)
    arch, default_nextn = INTEGRATED[family]
    nextn = default_nextn if nextn is None else nextn
    kvs = arch_kvs(arch, n_vocab, nextn=nextn) | {"general.name": f"synthetic {family}"} | tok | (extra or {})
    shapes = layout(arch, kvs, out)
    if arch in FUSED_QKV and fuse:
        shapes = _fuse_qkv(shapes)
    weights = _weights(shapes, seed, noise)
    target = out / f"{family}.gguf"
    _write(target, arch, kvs, weights)
    files = {"target": str(target)}
    if split:  # the same model as a trunk and a separate mtp- head, as the converter's --no-mtp / --mtp write it
        n_layer = _dims(arch)[3]
        trunk_names, head_names = _split(shapes, n_layer)
        trunk_kvs = arch_kvs(arch, n_vocab, nextn=0) | {"general.name": f"synthetic {family} trunk"} | tok
        _write(out / f"{family}-trunk.gguf", arch, trunk_kvs, {n: weights[n] for n in sorted(trunk_names)})
        _write(out / f"mtp-{family}.gguf", arch, kvs, {n: weights[n] for n in sorted(head_names)})
        # a trunk that still declares its NextN layers (llama.cpp's converter with --no-mtp)
        _write(out / f"{family}-trunkonly.gguf", arch, kvs, {n: weights[n] for n in sorted(trunk_names)})
        files |= {
            "trunk": str(out / f"{family}-trunk.gguf"),
            "head": str(out / f"mtp-{family}.gguf"),
            "trunk_only": str(out / f"{family}-trunkonly.gguf"),
        }
    return Fixture(family, arch, nextn, files)


def _write_deepseek4(out: Path, tok: dict, n_vocab: int, noise: float, seed: int) -> Fixture:
    """DeepSeek V4 ships its head only apart, as its converter writes them: a trunk with
    no NextN keys, and an ``mtp-`` head (``block_count`` one more, the last block a full
    block plus its nextn tensors) with root-level ``output_hc_*`` of its own.

    llama.cpp keeps V4's NextN layer only when the probe tensor is in the file, which a
    layout from metadata cannot have: the head block is laid out as a trunk block of a
    one-block-longer model, and its nextn tensors are added as ``deepseek4.cpp`` creates them."""
    arch = "deepseek4"
    n_embd, _, _, n_layer = _dims(arch)
    trunk_kvs = arch_kvs(arch, n_vocab, nextn=0) | tok
    shapes = layout(arch, trunk_kvs, out)
    weights = _weights(shapes, seed, noise)
    trunk = out / "deepseek4.gguf"
    _write(trunk, arch, trunk_kvs | {"general.name": "synthetic deepseek4"}, weights)

    head_kvs = arch_kvs(arch, n_vocab, nextn=1) | tok | {"general.name": "synthetic deepseek4 MTP head"}
    longer = arch_kvs(arch, n_vocab, nextn=1) | tok
    longer.pop(f"{arch}.nextn_predict_layers")
    long_shapes = layout(arch, longer, out)
    b = f"blk.{n_layer}"
    head_shapes = {n: ne for n, ne in long_shapes.items() if n.startswith(b + ".")}
    head_shapes |= {
        f"{b}.nextn.eh_proj.weight": (2 * n_embd, n_embd),
        f"{b}.nextn.enorm.weight": (n_embd,),
        f"{b}.nextn.hnorm.weight": (n_embd,),
        f"{b}.nextn.shared_head_norm.weight": (n_embd,),
    }
    head_w = _weights(head_shapes, seed + 1, noise)
    for name in ("token_embd.weight", "output_norm.weight", "output.weight"):
        head_w[name] = weights[name]
    rng = np.random.default_rng([seed, 99])
    for name in shapes:
        if name.startswith("output_hc_"):  # the head's own, not the trunk's
            head_w[name] = (weights[name] + rng.standard_normal(weights[name].shape) * noise).astype(np.float32)
    head = out / "mtp-deepseek4.gguf"
    _write(head, arch, head_kvs, dict(sorted(head_w.items())))
    return Fixture("deepseek4", arch, 1, {"target": str(trunk), "head": str(head)})


def _write_gemma4(out: Path, tok: dict, n_vocab: int, noise: float, seed: int) -> Fixture:
    arch = "gemma4"
    kvs = arch_kvs(arch, n_vocab, nextn=0, moe=False) | tok | {"general.name": "synthetic gemma4"}
    shapes = layout(arch, kvs, out)
    weights = _weights(shapes, seed, noise)
    akvs = assistant_kvs(_dims(arch)[0], n_vocab) | tok | {"general.name": "synthetic gemma4 assistant"}
    ashapes = assistant_layout(akvs)
    aw = _weights(ashapes, seed + 1, noise)
    # The assistant's pre-projection passes on the first n_embd dimensions of the target's
    # embedding of the token, and its tied output is the target's output on those
    # dimensions: the target's output reads only them, so the assistant ranks successors
    # as the (bigram) target does.
    n_embd = ashapes["token_embd.weight"][0]
    weights["output.weight"][:, n_embd:] = 0.0
    aw["token_embd.weight"] = np.ascontiguousarray(weights["output.weight"][:, :n_embd])
    target = out / "gemma4.gguf"
    _write(target, arch, kvs, weights)
    assistant = out / "gemma4-assistant.gguf"
    _write(assistant, "gemma4-assistant", akvs, aw)
    return Fixture(
        "gemma4", arch, akvs["gemma4-assistant.nextn_predict_layers"], {"target": str(target), "head": str(assistant)}
    )  # type: ignore[arg-type]


FIXTURES = (*INTEGRATED, "deepseek4", "gemma4")


#: families whose fixture is also written as a trunk and a separate head (compose tests)
SPLIT = ("qwen35moe", "glm4moe", "deepseek2", "step35")


def write_all(out: Path, families: tuple[str, ...] = FIXTURES, *, noise: float = 0.02) -> dict[str, Fixture]:
    return {f: write_family(f, out, noise=noise, split=f in SPLIT) for f in families}


def write_refusals(out: Path) -> dict[str, str]:
    """Files llama.cpp would abort on, for the refusal tests: two NextN layers where the
    MTP graph asserts one, a hybrid with no recurrent block, and mimo2 NextN blocks
    without the fused attn_qkv its MTP graph asserts on."""
    bad = out / "refusals"
    two = write_family("qwen35moe", bad / "two", nextn=2).files["target"]
    flat = write_family("qwen35moe", bad / "flat", extra={"qwen35moe.full_attention_interval": 1}).files["target"]
    unfused = write_family("mimo2", bad / "unfused", fuse=False).files["target"]
    return {"two_nextn": two, "no_recurrent": flat, "unfused_qkv": unfused}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    out = Path(args[0])
    families = tuple(args[1:]) or FIXTURES
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    fixtures = write_all(out, families)
    index: dict[str, object] = {k: {"arch": v.arch, "n_nextn": v.n_nextn, **v.files} for k, v in fixtures.items()}
    if not args[1:]:
        index["refusals"] = write_refusals(out)
    print(json.dumps(index))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
