"""Encoding GGUF KV and tensor-info records (the inverse of :mod:`engine.gguf.reader`).

Compose copies unchanged records as raw bytes; only new or changed records are encoded
here. Arrays keep their element type, so an INT16 array stays INT16.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

from engine.errors import ComposeError
from engine.gguf.constants import NUMPY_DTYPES, SCALAR_FORMATS, ValueType

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")

#: names accepted by ``--set-kv KEY=TYPE:VALUE``
TYPE_NAMES: dict[str, ValueType] = {
    "u8": ValueType.UINT8,
    "i8": ValueType.INT8,
    "u16": ValueType.UINT16,
    "i16": ValueType.INT16,
    "u32": ValueType.UINT32,
    "i32": ValueType.INT32,
    "f32": ValueType.FLOAT32,
    "bool": ValueType.BOOL,
    "str": ValueType.STRING,
    "u64": ValueType.UINT64,
    "i64": ValueType.INT64,
    "f64": ValueType.FLOAT64,
}
_NAME_OF = {v: k for k, v in TYPE_NAMES.items()}

_INT_RANGES = {
    ValueType.UINT8: (0, 2**8 - 1),
    ValueType.INT8: (-(2**7), 2**7 - 1),
    ValueType.UINT16: (0, 2**16 - 1),
    ValueType.INT16: (-(2**15), 2**15 - 1),
    ValueType.UINT32: (0, 2**32 - 1),
    ValueType.INT32: (-(2**31), 2**31 - 1),
    ValueType.UINT64: (0, 2**64 - 1),
    ValueType.INT64: (-(2**63), 2**63 - 1),
}


def type_name(vtype: ValueType, elem: ValueType | None = None) -> str:
    if vtype == ValueType.ARRAY:
        return f"arr[{_NAME_OF[elem]}]" if elem is not None else "arr"
    return _NAME_OF[vtype]


def encode_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _U64.pack(len(b)) + b


def _encode_scalar(vtype: ValueType, value: Any) -> bytes:
    if vtype == ValueType.STRING:
        return encode_string(str(value))
    if vtype in _INT_RANGES:
        lo, hi = _INT_RANGES[vtype]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"{value!r} is not a valid {_NAME_OF[vtype]}")
    if vtype in (ValueType.FLOAT32, ValueType.FLOAT64) and not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    if vtype == ValueType.BOOL and not isinstance(value, bool):
        raise ValueError(f"{value!r} is not a bool")
    return struct.pack(SCALAR_FORMATS[vtype][0], value)


def encode_value(vtype: ValueType, value: Any, elem: ValueType | None = None) -> bytes:
    """Type field + value bytes."""
    if vtype != ValueType.ARRAY:
        return _U32.pack(vtype) + _encode_scalar(vtype, value)
    assert elem is not None
    if elem == ValueType.ARRAY:
        raise ValueError("nested arrays are not supported by llama.cpp")
    body = b"".join(_encode_scalar(elem, v) for v in value)
    return _U32.pack(ValueType.ARRAY) + _U32.pack(elem) + _U64.pack(len(value)) + body


def encode_kv(key: str, vtype: ValueType, value: Any, elem: ValueType | None = None) -> bytes:
    return encode_string(key) + encode_value(vtype, value, elem)


def encode_array_raw(key: str, elem: ValueType, count: int, body: bytes) -> bytes:
    """An array KV from already-encoded element bytes (keeps exotic element types)."""
    return encode_string(key) + _U32.pack(ValueType.ARRAY) + _U32.pack(elem) + _U64.pack(count) + body


def array_body(kv) -> bytes:
    """Element bytes of an array KV (everything after type, element type, count)."""
    return bytes(kv._buf[kv.value_start + 12 : kv.end])


def encode_tensor_info(name: str, dims: tuple[int, ...], ttype: int, offset: int) -> bytes:
    out = [encode_string(name), _U32.pack(len(dims))]
    out += [_I64.pack(d) for d in dims]
    out += [_I32.pack(ttype), _U64.pack(offset)]
    return b"".join(out)


def header_prefix(version: int, n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + _U32.pack(version) + _I64.pack(n_tensors) + _I64.pack(n_kv)


def parse_set_kv(spec: str) -> tuple[str, ValueType, Any, ValueType | None]:
    """``KEY=TYPE:VALUE`` -> (key, type, value, element type).

    TYPE is one of u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str, or ``arr[T]`` with
    a JSON list value (``general.tags=arr[str]:["a","b"]``)."""
    key, eq, rest = spec.partition("=")
    tname, colon, raw = rest.partition(":")
    if not key or not eq or not colon:
        raise ComposeError(
            f"--set-kv {spec!r}: expected KEY=TYPE:VALUE (e.g. general.name=str:My model)", code="bad_set_kv"
        )
    try:
        if tname.startswith("arr[") and tname.endswith("]"):
            elem = TYPE_NAMES[tname[4:-1]]
            values = json.loads(raw)
            if not isinstance(values, list):
                raise ValueError("an array value must be a JSON list")
            values = [_coerce(elem, v) for v in values]
            encode_value(ValueType.ARRAY, values, elem)  # range checks
            return key, ValueType.ARRAY, values, elem
        vtype = TYPE_NAMES[tname]
        value = _coerce(vtype, raw)
        _encode_scalar(vtype, value)
        return key, vtype, value, None
    except KeyError:
        raise ComposeError(
            f"--set-kv {spec!r}: unknown type {tname!r} (use {', '.join(TYPE_NAMES)} or arr[T])", code="bad_set_kv"
        ) from None
    except ValueError as e:
        raise ComposeError(f"--set-kv {spec!r}: {e}", code="bad_set_kv") from None


def _coerce(vtype: ValueType, raw: Any) -> Any:
    if vtype == ValueType.STRING:
        return raw if isinstance(raw, str) else str(raw)
    if vtype == ValueType.BOOL:
        if isinstance(raw, bool):
            return raw
        low = str(raw).lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise ValueError(f"{raw!r} is not a bool (true/false)")
    if vtype in (ValueType.FLOAT32, ValueType.FLOAT64):
        v = float(raw)
        if vtype == ValueType.FLOAT32 and math.isfinite(v) and abs(v) > 3.4028235e38:
            raise ValueError(f"{raw!r} does not fit f32")
        return v
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    return int(str(raw), 0)


def element_size(elem: ValueType) -> int | None:
    return None if elem == ValueType.STRING else SCALAR_FORMATS[elem][1]


assert set(NUMPY_DTYPES) == set(SCALAR_FORMATS)
