"""A GGUF's quantization as its author named it: ``general.file_type``.

The value is llama.cpp's ``llama_ftype`` (``include/llama.h`` of the vendored llama.cpp;
the numbers are part of the file format, so they are listed here rather than read from
llama.cpp, which this layer never loads). A Q4_K_M file holds Q4_K, Q6_K, Q5_0, Q8_0 and
F32 tensors; its largest tensor type is not its name.
"""

from __future__ import annotations

from collections import Counter

from engine.gguf.reader import GGUFHeader
from engine.gguf.shards import ModelSet

#: llama_ftype -> the name users know (``Q4_K_M``)
FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
    41: "Q2_0",
}

#: bit 10 of the value: the type was guessed by the writer, not chosen by the user
_GUESSED = 1024


def file_type_name(value: object) -> str | None:
    """Name of a ``general.file_type`` value, or None when it is absent or unknown."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    name = FILE_TYPES.get(value & ~_GUESSED)
    if name is None:
        return None
    return f"{name} (guessed)" if value & _GUESSED else name


def header_file_type(h: GGUFHeader) -> str | None:
    return file_type_name(h.get("general.file_type"))


def largest_tensor_type(ms: ModelSet) -> str | None:
    """The tensor type holding the most bytes of a model set."""
    sizes: Counter[str] = Counter()
    for _, t in ms.all_tensors():
        sizes[t.type_name] += t.nbytes
    return sizes.most_common(1)[0][0] if sizes else None


def quantization(h: GGUFHeader, largest: str | None) -> tuple[str | None, str]:
    """The quantization to show and where it comes from: the author's name for it
    (``general.file_type``), else the largest tensor type."""
    named = header_file_type(h)
    if named is not None:
        return named, "general.file_type"
    return largest, "largest tensor type"
