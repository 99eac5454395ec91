"""Exact mode: a configuration in which a row's logits do not depend on its batch, so
greedy MTP output is bit-identical to one-token-at-a-time greedy decoding.

Measured on llama-cpp-python 0.3.36's CPU backend (``mtp-studio bench identity``), four
things make a row depend on the batch it is decoded in, and each has a switch:

* **weight repacking** (llama.cpp's "extra buffer types": AMX, AVX repacked Q4_0/Q4_K,
  ...): different kernels for one row and for several -> ``use_extra_bufts = False``;
* **the tiled K-quant matmul**, taken for batches of 8 rows or more ->
  ``GGML_CPU_TILED_MM=0``, read once per process before llama.cpp's first matmul;
* **attention**: without flash attention the batched path differs at every width; with
  it, a one-token decode over 512 or more cached positions splits the KV range across
  threads and reduces partial sums (``use_split_kv_path``), which batches never do ->
  flash attention on and a Q8_0 KV cache. The split path only takes F16/F32 caches, and so
  does the tiled kernel that batches of 64 rows or more would take (``GGML_FA_TILE_Q``),
  which would give a prompt's rows other values when it is split differently (a reused
  prefix): the quantized cache keeps every batch on one kernel (measured:
  ``prefill_split_diff`` 0 at 512-row batches);
* **llamafile's sgemm** for F16/F32 weights in batches -> a build with
  ``-DGGML_LLAMAFILE=OFF`` (the backend picker's "exact" CPU build). Quantized weights
  never take it here.

The cost is real (see the identity table in docs/mtp.md), so exact mode is a choice. GPU
backends are not covered: their kernels pick algorithms by batch size too, and nothing
here was measured on them.
"""

from __future__ import annotations

import os

#: LLAMA_FLASH_ATTN_TYPE_ENABLED
EXACT_FLASH_ATTN = 1
#: GGML_TYPE_Q8_0
EXACT_KV_TYPE = 8
#: the process-wide switch for ggml-cpu's tiled K-quant matmul
TILED_ENV = "GGML_CPU_TILED_MM"
#: asks for exact mode before llama.cpp loads (CLI ``--exact``, the app's setting)
EXACT_ENV = "MTP_STUDIO_EXACT"


def requested() -> bool:
    return os.environ.get(EXACT_ENV) == "1"


def request() -> None:
    """Ask for exact mode in this process; before llama.cpp is loaded (ggml reads its
    switches once)."""
    os.environ[EXACT_ENV] = "1"
    prepare_environment()


def prepare_environment() -> None:
    """Called before llama.cpp is loaded: exact mode turns the tiled matmul off for the
    whole process (ggml reads the switch once)."""
    if requested():
        os.environ[TILED_ENV] = "0"


#: whether the tiled matmul was off when llama.cpp was loaded (None: not loaded yet)
_tiled_off_at_load: bool | None = None


def note_loaded() -> None:
    """Called by :mod:`engine.runtime.llama.lib` as llama.cpp is loaded."""
    global _tiled_off_at_load
    _tiled_off_at_load = os.environ.get(TILED_ENV) == "0"


def tiled_off() -> bool:
    """Whether exact mode can hold in this process: the tiled matmul is off, or will be
    when llama.cpp loads (exact mode asked for before it did)."""
    if _tiled_off_at_load is None:
        prepare_environment()
        return os.environ.get(TILED_ENV) == "0"
    return _tiled_off_at_load


def build_uses_llamafile(system_info: str) -> bool:
    return "LLAMAFILE = 1" in system_info


FLOAT_WEIGHTS = ("F32", "F16", "BF16")


#: exact mode's KV cache type (Q8_0) stores 32 values per block
KV_BLOCK = 32


def head_dims_problem(header) -> str | None:
    """Why exact mode cannot run this model (its KV cache is Q8_0, so every attention
    head must be a whole number of 32-value blocks), or None. ``header``: a GGUF header."""
    arch = header.architecture
    n_embd, heads = header.get(f"{arch}.embedding_length"), header.get(f"{arch}.attention.head_count")
    default = n_embd // heads if isinstance(n_embd, int) and isinstance(heads, int) and heads else None
    k = header.get(f"{arch}.attention.key_length", default)
    v = header.get(f"{arch}.attention.value_length", default)
    bad = [d for d in (k, v) if isinstance(d, int) and d % KV_BLOCK]
    if not bad:
        return None
    return (
        f"Exact mode keeps the KV cache as Q8_0, which needs attention heads a multiple of {KV_BLOCK} wide; "
        f"this model's heads are {k} (keys) and {v} (values) wide. Turn exact mode off for this model."
    )
