"""Writing the tiny fixture models of :mod:`tests.synth.families` and
:mod:`tests.synth.pooledmodels`: which tensors a family has, asked of llama.cpp itself
(:func:`layout`: the metadata written with gguf-py, ``llama_model_init_from_user`` builds the
model from it and reports its tensors), weights of our choosing (:func:`fixture_weights`: drafts get
accepted), the demo's tokenizer (:func:`tokenizer_kvs`), and the file written with gguf-py
(:func:`write_gguf`, through a temporary file). Building a layout runs llama.cpp on metadata,
which can abort the process on a bad shape: callers run in a child process.
"""

from __future__ import annotations

import ctypes
import math
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.synth.qwen35 import CHATML_TEMPLATE, add_any
from engine.synth.tokenizer import train_bpe


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


def write_gguf(path: Path, arch: str, kvs: dict[str, object], tensors: dict[str, np.ndarray]) -> None:
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
    write_gguf(meta, arch, kvs, {})
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
def values(name: str, ne: tuple[int, ...], rng: np.random.Generator, noise: float) -> np.ndarray:
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


def fixture_weights(shapes: dict[str, tuple[int, ...]], seed: int, noise: float) -> dict[str, np.ndarray]:
    out = {}
    for i, (name, ne) in enumerate(sorted(shapes.items())):
        rng = np.random.default_rng([seed, i])
        out[name] = values(name, ne, rng, noise)
    for name in out:  # a head's own embedding and output (optional in llama.cpp) equal the trunk's
        if name.endswith(".nextn.embed_tokens.weight") and "token_embd.weight" in out:
            out[name] = out["token_embd.weight"].copy()
        elif name.endswith(".nextn.shared_head_head.weight") and "output.weight" in out:
            out[name] = out["output.weight"].copy()
    return out


def tokenizer_kvs() -> dict[str, object]:
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
