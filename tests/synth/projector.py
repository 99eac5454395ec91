"""Tiny random-weight multimodal projectors ("mmproj" GGUFs) that the real libmtmd of
llama-cpp-python loads and encodes images with, for tests: :func:`write_projector`.

Two projector types of MTP model families are written, with the tensors and keys that
``tools/mtmd/clip.cpp`` reads for them (``load_hparams`` / ``load_tensors``) and that their
graphs (``models/qwen3vl.cpp``, ``models/gemma4v.cpp``) assert on:

- ``qwen3vl_merger`` (Qwen3.5 / 3.6): two patch convolutions summed, a patch bias, learned
  positions, fused ``attn_qkv``, 2×2 spatial merge, ``mm.0``/``mm.2`` merger, optional
  deepstack layers. Its text model uses M-RoPE positions (the bundled demo, qwen35).
- ``gemma4v`` (Gemma 4): one convolution, x/y position tables, RMS-normed blocks with
  q/k norms, average pooling by ``projector.scale_factor``, ``mm.input_projection``.
  libmtmd decodes its images non-causally.

The projector's output width (what ``mtmd_init_from_file`` compares with the text model's
``llama_model_n_embd_inp``) is ``n_embd_out``: ``mm.2``'s rows × (1 + deepstack layers)
for qwen3vl_merger, ``mm.input_projection``'s rows for gemma4v.

Writing uses gguf-py only (no llama.cpp). :func:`probe` loads a projector with libmtmd and
encodes images; it can abort the process on a bad file, so run it in a child:
``python -m tests.synth.projector MMPROJ MODEL [WxH:SEED ...]`` prints its JSON.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.synth.fixturewriter import write_gguf

#: projector types :func:`write_projector` writes
KINDS = ("qwen3vl_merger", "gemma4v")


@dataclass(frozen=True)
class Shape:
    """The vision tower's size: width, heads, feed-forward width, blocks, merge factor."""

    n_embd: int = 32
    n_head: int = 2
    n_ff: int = 64
    n_layer: int = 1
    merge: int = 2


#: default (image_size, patch_size) per kind: image_size sets the learned position table
DEFAULT_SIZES = {"qwen3vl_merger": (64, 8), "gemma4v": (64, 8)}

#: gemma4v's position tables: one row per patch column / row, so an image side may span
#: at most this many patches (ggml_get_rows aborts past it)
GEMMA4V_POSITIONS = 256


def _rand(rng: np.random.Generator, *shape: int, scale: float = 0.2) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _ones(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


def _zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _vision_kvs(proj_key: str, kind: str, n_embd_out: int, image_size: int, patch_size: int, s: Shape) -> dict:
    """The keys every vision projector needs (clip.cpp ``load_hparams``: missing required
    keys throw, image_mean/std need three values)."""
    return {
        "general.type": "mmproj",
        "general.name": f"synthetic {kind} projector",
        "general.file_type": 0,
        "clip.has_vision_encoder": True,
        proj_key: kind,
        "clip.vision.projection_dim": n_embd_out,
        "clip.vision.image_size": image_size,
        "clip.vision.patch_size": patch_size,
        "clip.vision.embedding_length": s.n_embd,
        "clip.vision.feed_forward_length": s.n_ff,
        "clip.vision.block_count": s.n_layer,
        "clip.vision.attention.head_count": s.n_head,
        "clip.vision.attention.layer_norm_epsilon": 1e-6,
        "clip.vision.image_mean": [0.5, 0.5, 0.5],
        "clip.vision.image_std": [0.5, 0.5, 0.5],
    }


def _qwen3vl(
    rng: np.random.Generator, n_embd_out: int, image_size: int, patch_size: int, s: Shape, deepstack: int
) -> tuple[dict, dict]:
    if n_embd_out % (1 + deepstack):
        raise ValueError(f"n_embd_out {n_embd_out} must split into {1 + deepstack} equal paths (main + deepstack)")
    if image_size % (2 * patch_size):
        raise ValueError("qwen3vl_merger needs image_size to be a multiple of 2 × patch_size")
    main = n_embd_out // (1 + deepstack)
    d, p, m = s.n_embd, patch_size, 4 * s.n_embd  # the 2×2 merge stacks four patches
    kvs = _vision_kvs("clip.projector_type", "qwen3vl_merger", n_embd_out, image_size, patch_size, s)
    kvs |= {"clip.use_gelu": True, "clip.vision.spatial_merge_size": 2}
    if deepstack:
        kvs["clip.vision.is_deepstack_layers"] = [il < deepstack for il in range(s.n_layer)]
    t = {
        "v.patch_embd.weight": _rand(rng, d, 3, p, p),  # ggml ne [p, p, 3, d]
        "v.patch_embd.weight.1": _rand(rng, d, 3, p, p),
        "v.patch_embd.bias": _rand(rng, d),
        "v.position_embd.weight": _rand(rng, (image_size // p) ** 2, d),
    }
    for il in range(s.n_layer):
        b = f"v.blk.{il}"
        t |= {
            f"{b}.ln1.weight": _ones(d),
            f"{b}.ln1.bias": _zeros(d),
            f"{b}.attn_qkv.weight": _rand(rng, 3 * d, d),
            f"{b}.attn_qkv.bias": _zeros(3 * d),
            f"{b}.attn_out.weight": _rand(rng, d, d),
            f"{b}.attn_out.bias": _zeros(d),
            f"{b}.ln2.weight": _ones(d),
            f"{b}.ln2.bias": _zeros(d),
            f"{b}.ffn_up.weight": _rand(rng, s.n_ff, d),
            f"{b}.ffn_up.bias": _zeros(s.n_ff),
            f"{b}.ffn_down.weight": _rand(rng, d, s.n_ff),
            f"{b}.ffn_down.bias": _zeros(d),
        }
        if il < deepstack:
            ds = f"v.deepstack.{il}"
            t |= {
                f"{ds}.norm.weight": _ones(m),
                f"{ds}.norm.bias": _zeros(m),
                f"{ds}.fc1.weight": _rand(rng, m, m),
                f"{ds}.fc1.bias": _zeros(m),
                f"{ds}.fc2.weight": _rand(rng, main, m),
                f"{ds}.fc2.bias": _zeros(main),
            }
    t |= {
        "v.post_ln.weight": _ones(d),
        "v.post_ln.bias": _zeros(d),
        "mm.0.weight": _rand(rng, m, m),
        "mm.0.bias": _zeros(m),
        "mm.2.weight": _rand(rng, main, m),
        "mm.2.bias": _zeros(main),
    }
    return kvs, t


def _gemma4v(
    rng: np.random.Generator, n_embd_out: int, image_size: int, patch_size: int, s: Shape
) -> tuple[dict, dict]:
    d, p, hd = s.n_embd, patch_size, s.n_embd // s.n_head
    kvs = _vision_kvs("clip.vision.projector_type", "gemma4v", n_embd_out, image_size, patch_size, s)
    kvs["clip.vision.projector.scale_factor"] = s.merge  # the pooling kernel (Gemma 4 ships 3)
    t = {
        "v.patch_embd.weight": _rand(rng, d, 3, p, p),
        # two lookup tables, x then y: ggml ne [d, positions, 2]
        "v.position_embd.weight": _rand(rng, 2, GEMMA4V_POSITIONS, d),
    }
    for il in range(s.n_layer):
        b = f"v.blk.{il}"
        t |= {
            f"{b}.ln1.weight": _ones(d),
            f"{b}.attn_q.weight": _rand(rng, d, d),
            f"{b}.attn_k.weight": _rand(rng, d, d),
            f"{b}.attn_v.weight": _rand(rng, d, d),
            f"{b}.attn_q_norm.weight": _ones(hd),
            f"{b}.attn_k_norm.weight": _ones(hd),
            f"{b}.attn_out.weight": _rand(rng, d, d),
            f"{b}.attn_post_norm.weight": _ones(d),
            f"{b}.ln2.weight": _ones(d),
            f"{b}.ffn_gate.weight": _rand(rng, s.n_ff, d),
            f"{b}.ffn_up.weight": _rand(rng, s.n_ff, d),
            f"{b}.ffn_down.weight": _rand(rng, d, s.n_ff),
            f"{b}.ffn_post_norm.weight": _ones(d),
            f"{b}.out_scale.weight": _ones(1),
        }
    t["mm.input_projection.weight"] = _rand(rng, n_embd_out, d)  # ggml ne [d, n_embd_out]
    return kvs, t


def write_projector(
    path: str | os.PathLike[str],
    kind: str,
    n_embd_out: int,
    *,
    image_size: int | None = None,
    patch_size: int | None = None,
    seed: int = 0,
    deepstack: int = 0,
    shape: Shape | None = None,
) -> Path:
    """Write a tiny ``kind`` projector (one of :data:`KINDS`) whose embeddings are
    ``n_embd_out`` wide (the text model's ``n_embd_inp``). ``deepstack`` (qwen3vl_merger
    only): that many deepstack layers, each adding ``n_embd_out / (1 + deepstack)``
    columns, as Qwen3-VL's projectors do. Returns ``path``."""
    if kind not in KINDS:
        raise ValueError(f"unknown projector kind {kind!r}; one of {', '.join(KINDS)}")
    if deepstack and kind != "qwen3vl_merger":
        raise ValueError("only qwen3vl_merger projectors have deepstack layers")
    default_image, default_patch = DEFAULT_SIZES[kind]
    image_size = image_size or default_image
    patch_size = patch_size or default_patch
    s = shape or Shape(n_layer=max(1, deepstack))
    if s.n_layer < deepstack:
        raise ValueError(f"{deepstack} deepstack layers need at least as many blocks, not {s.n_layer}")
    rng = np.random.default_rng(seed)
    if kind == "qwen3vl_merger":
        kvs, tensors = _qwen3vl(rng, n_embd_out, image_size, patch_size, s, deepstack)
    else:
        kvs, tensors = _gemma4v(rng, n_embd_out, image_size, patch_size, s)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(out, "clip", kvs, tensors)
    return out


# ----------------------------------------------------------------- libmtmd check
def probe(mmproj: str | Path, model: str | Path, images: list[bytes], *, warmup: bool = True) -> dict:
    """Load ``model`` and ``mmproj`` with llama.cpp / libmtmd, tokenize one prompt per image
    with the default marker, encode each image chunk and report what libmtmd says. Can
    abort the process on a bad file: call it in a child (see :func:`main`)."""
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    import llama_cpp
    from llama_cpp import mtmd_cpp as M

    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    lm = llama_cpp.llama_model_load_from_file(str(model).encode(), mp)
    if not lm:
        return {"ok": False, "stage": "model", "error": f"llama.cpp could not load {model}"}
    n_embd = int(llama_cpp.llama_model_n_embd_inp(lm))
    params = M.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 2
    params.warmup = warmup
    params.print_timings = False
    t0 = time.perf_counter()
    ctx = M.mtmd_init_from_file(str(mmproj).encode(), lm, params)
    init_ms = (time.perf_counter() - t0) * 1000
    if not ctx:
        llama_cpp.llama_model_free(lm)
        return {"ok": False, "stage": "init", "n_embd_inp": n_embd, "error": "mtmd_init_from_file returned NULL"}
    out: dict = {
        "ok": True,
        "n_embd_inp": n_embd,
        "init_ms": round(init_ms, 2),
        "mrope": bool(M.mtmd_decode_use_mrope(ctx)),
        "non_causal": bool(M.mtmd_decode_use_non_causal(ctx, None)),
        "vision": bool(M.mtmd_support_vision(ctx)),
        "audio": bool(M.mtmd_support_audio(ctx)),
        "images": [],
    }
    marker = M.mtmd_default_marker()
    for data in images:
        out["images"].append(_encode_one(M, ctx, data, marker, n_embd))
    M.mtmd_free(ctx)
    llama_cpp.llama_model_free(lm)
    out["ok"] = all(i.get("ok") for i in out["images"])
    return out


def _encode_one(M, ctx, data: bytes, marker: bytes, n_embd: int) -> dict:
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bmp = M.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(data), False)
    if not bmp:
        return {"ok": False, "stage": "bitmap"}
    res: dict = {"bitmap": [int(M.mtmd_bitmap_get_nx(bmp)), int(M.mtmd_bitmap_get_ny(bmp))]}
    prompt = b"describe " + marker + b" please"
    text = M.mtmd_input_text(prompt, len(prompt), True, True)
    chunks = M.mtmd_input_chunks_init()
    bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bmp)
    try:
        rc = M.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1)
        if rc != 0:
            return res | {"ok": False, "stage": "tokenize", "rc": rc}
        res["chunk_types"] = [
            int(M.mtmd_input_chunk_get_type(M.mtmd_input_chunks_get(chunks, i)))
            for i in range(M.mtmd_input_chunks_size(chunks))
        ]
        for i, kind in enumerate(res["chunk_types"]):
            if kind != M.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                continue
            chunk = M.mtmd_input_chunks_get(chunks, i)
            tokens = M.mtmd_input_chunk_get_tokens_image(chunk)
            n_tokens = int(M.mtmd_image_tokens_get_n_tokens(tokens))
            res |= {
                "n_tokens": n_tokens,
                "nx": int(M.mtmd_image_tokens_get_nx(tokens)),
                "ny": int(M.mtmd_image_tokens_get_ny(tokens)),
                "n_pos": int(M.mtmd_input_chunk_get_n_pos(chunk)),
            }
            t0 = time.perf_counter()
            rc = M.mtmd_encode_chunk(ctx, chunk)
            res["encode_ms"] = round((time.perf_counter() - t0) * 1000, 2)
            if rc != 0:
                return res | {"ok": False, "stage": "encode", "rc": rc}
            ptr = M.mtmd_get_output_embd(ctx)
            embd = np.ctypeslib.as_array(ptr, shape=(n_tokens * n_embd,)).copy()
            res |= {
                "embd_sha256": hashlib.sha256(embd.tobytes()).hexdigest(),
                "embd_finite": bool(np.isfinite(embd).all()),
                "embd_std": float(embd.std()),
            }
        return res | {"ok": "n_tokens" in res}
    finally:
        M.mtmd_input_chunks_free(chunks)
        M.mtmd_bitmap_free(bmp)


def image_of(spec: str) -> bytes:
    """``WxH:SEED`` (a PNG), ``jpeg:WxH:SEED``, ``truncated`` or ``corrupt`` (broken PNGs)."""
    from tests.synth import images

    if spec in ("truncated", "corrupt"):
        return images.truncated_png() if spec == "truncated" else images.corrupt_png()
    fmt, _, rest = spec.partition(":") if spec.startswith("jpeg:") else ("png", "", spec)
    size, _, seed = rest.partition(":")
    w, _, h = size.partition("x")
    make = images.jpeg_bytes if fmt == "jpeg" else images.png_bytes
    return make(int(w), int(h), int(seed or 0))


def main(argv: list[str] | None = None) -> int:
    """``MMPROJ MODEL [IMAGE ...]`` (:func:`image_of` specs, default ``64x48:1 64x48:2``;
    ``--no-warmup``): :func:`probe`'s JSON on stdout."""
    args = list(sys.argv[1:] if argv is None else argv)
    warmup = "--no-warmup" not in args
    args = [a for a in args if a != "--no-warmup"]
    images = [image_of(spec) for spec in args[2:] or ["64x48:1", "64x48:2"]]
    print(json.dumps(probe(args[0], args[1], images, warmup=warmup)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
