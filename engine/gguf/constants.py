"""GGUF v3 constants as llama.cpp's ``ggml/src/gguf.cpp`` and ``ggml.c`` define them.

Kept here (not taken from the ``gguf`` package) because the validator must agree with
the llama.cpp this app ships, and gguf-py releases lag it (Q2_0 is missing from 0.19).
"""

from __future__ import annotations

import enum
import re

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_NAME_BYTES = 63  # GGML_MAX_NAME is 64 including the NUL
MAX_DIMS = 4
MAX_STRING_BYTES = 1 << 30
MAX_ARRAY_ELEMENTS = 1 << 30


class ValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


#: struct format (little-endian) and size of each fixed-size value type
SCALAR_FORMATS: dict[ValueType, tuple[str, int]] = {
    ValueType.UINT8: ("<B", 1),
    ValueType.INT8: ("<b", 1),
    ValueType.UINT16: ("<H", 2),
    ValueType.INT16: ("<h", 2),
    ValueType.UINT32: ("<I", 4),
    ValueType.INT32: ("<i", 4),
    ValueType.FLOAT32: ("<f", 4),
    ValueType.BOOL: ("<?", 1),
    ValueType.UINT64: ("<Q", 8),
    ValueType.INT64: ("<q", 8),
    ValueType.FLOAT64: ("<d", 8),
}

#: numpy dtype of each fixed-size element type (arrays are decoded in one call)
NUMPY_DTYPES: dict[ValueType, str] = {
    ValueType.UINT8: "<u1",
    ValueType.INT8: "<i1",
    ValueType.UINT16: "<u2",
    ValueType.INT16: "<i2",
    ValueType.UINT32: "<u4",
    ValueType.INT32: "<i4",
    ValueType.FLOAT32: "<f4",
    ValueType.BOOL: "<u1",
    ValueType.UINT64: "<u8",
    ValueType.INT64: "<i8",
    ValueType.FLOAT64: "<f8",
}


class TensorType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42


#: (elements per block, bytes per block) for every type this llama.cpp can load
BLOCK_SIZES: dict[TensorType, tuple[int, int]] = {
    TensorType.F32: (1, 4),
    TensorType.F16: (1, 2),
    TensorType.Q4_0: (32, 18),
    TensorType.Q4_1: (32, 20),
    TensorType.Q5_0: (32, 22),
    TensorType.Q5_1: (32, 24),
    TensorType.Q8_0: (32, 34),
    TensorType.Q8_1: (32, 40),
    TensorType.Q2_K: (256, 84),
    TensorType.Q3_K: (256, 110),
    TensorType.Q4_K: (256, 144),
    TensorType.Q5_K: (256, 176),
    TensorType.Q6_K: (256, 210),
    TensorType.Q8_K: (256, 292),
    TensorType.IQ2_XXS: (256, 66),
    TensorType.IQ2_XS: (256, 74),
    TensorType.IQ3_XXS: (256, 98),
    TensorType.IQ1_S: (256, 50),
    TensorType.IQ4_NL: (32, 18),
    TensorType.IQ3_S: (256, 110),
    TensorType.IQ2_S: (256, 82),
    TensorType.IQ4_XS: (256, 136),
    TensorType.I8: (1, 1),
    TensorType.I16: (1, 2),
    TensorType.I32: (1, 4),
    TensorType.I64: (1, 8),
    TensorType.F64: (1, 8),
    TensorType.IQ1_M: (256, 56),
    TensorType.BF16: (1, 2),
    TensorType.TQ1_0: (256, 54),
    TensorType.TQ2_0: (256, 66),
    TensorType.MXFP4: (32, 17),
    TensorType.NVFP4: (64, 36),
    TensorType.Q1_0: (128, 18),
    TensorType.Q2_0: (64, 18),
}

#: ``<prefix>-00001-of-00003.gguf`` (llama.cpp's ``llama_split_path`` format)
SHARD_PATTERN = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

# KVs every shard of a split set carries (all others live only in shard 1)
SPLIT_NO = "split.no"
SPLIT_COUNT = "split.count"
SPLIT_TENSORS_COUNT = "split.tensors.count"
SPLIT_KEYS = (SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT)
ALIGNMENT_KEY = "general.alignment"
ARCH_KEY = "general.architecture"


def shard_name(prefix: str, no: int, count: int) -> str:
    """File name of shard ``no`` (1-based) of ``count``."""
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"


def pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment
