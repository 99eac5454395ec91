"""Quantizing a GGUF with llama.cpp's own quantizer (``llama_model_quantize``).

Used to make quantized versions of the project's constructed models (so every MTP test
also runs on quantized arithmetic) and of benchmark models. The output is written to a
temp file beside it and renamed when complete; the input is never touched. llama.cpp
picks a fallback type for tensors whose rows do not fit the requested block size (a
128-wide row cannot be Q4_K), exactly as ``llama-quantize`` does.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import InvalidRequestError, ModelLoadError
from engine.gguf.filetype import FILE_TYPES
from engine.runtime.llama.lib import default_threads, llama

#: the quantizations offered: name -> llama_ftype
QUANT_TYPES = {
    name: ftype for ftype, name in FILE_TYPES.items() if name in ("Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "F16")
}


def quantize(
    src: str | Path, dst: str | Path, quant: str, *, threads: int | None = None, requantize: bool = False
) -> Path:
    """Write ``src`` quantized to ``quant`` (e.g. ``"Q4_K_M"``) at ``dst``. ``requantize``
    allows a quantized input (llama.cpp refuses one otherwise: quality is lost twice)."""
    if quant not in QUANT_TYPES:
        raise InvalidRequestError(f"unknown quantization {quant!r}; choose one of {', '.join(QUANT_TYPES)}")
    src, dst = Path(src), Path(dst)
    if dst.resolve() == src.resolve():
        raise InvalidRequestError("the quantized file must not replace its input; choose another output path")
    L = llama()
    params = L.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[quant]
    params.nthread = threads or default_threads()
    params.allow_requantize = bool(requantize)
    tmp = dst.with_name(f".{dst.name}.partial-{os.getpid()}")
    try:
        rc = L.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise ModelLoadError(f"llama.cpp could not quantize {src.name} to {quant} (status {rc})")
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst
