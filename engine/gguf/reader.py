"""A fast GGUF header parser that keeps every KV and tensor-info record as a raw span.

Only the header is read (through ``mmap``, so a multi-GB file costs a few pages).
Values are decoded lazily: opening a header with 262k tokens and 250k merges only walks
the string lengths. Every read is bounds-checked against the bytes available, so a
truncated or corrupted file raises :class:`~engine.errors.GGUFError` with the offset,
never reads past the end and never loops on a garbage count.

Structural problems that do not stop parsing (duplicate keys, bad alignment, long
names, unknown tensor types, ...) are left for :mod:`engine.gguf.validate` to report.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import GGUFError, ModelNotFoundError
from engine.gguf.constants import (
    ALIGNMENT_KEY,
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_ARRAY_ELEMENTS,
    MAX_STRING_BYTES,
    NUMPY_DTYPES,
    SCALAR_FORMATS,
    SUPPORTED_VERSIONS,
    BLOCK_SIZES,
    TensorType,
    ValueType,
    pad,
)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")


@dataclass(frozen=True)
class KV:
    """One metadata entry. ``start:end`` is the whole record (key, type, value) in the
    file; ``value_start`` is where the value (after the type field) begins."""

    key: str
    type: ValueType
    start: int
    value_start: int
    end: int
    elem_type: ValueType | None
    count: int | None
    _buf: Any  # bytes-like holding the header

    @property
    def raw(self) -> bytes:
        return bytes(self._buf[self.start : self.end])

    @property
    def raw_value(self) -> bytes:
        """Value bytes including the type field (everything after the key)."""
        return bytes(self._buf[self.value_start - 4 : self.end])

    @cached_property
    def value(self) -> Any:
        """Scalars as Python values, strings as ``str``, arrays as lists."""
        if self.type == ValueType.ARRAY:
            return self.array_list()
        return _decode_scalar(self._buf, self.value_start, self.type, self.end)

    def array_list(self) -> list:
        assert self.elem_type is not None and self.count is not None
        body = self.value_start + 12
        if self.elem_type == ValueType.STRING:
            out, off = [], body
            for _ in range(self.count):
                (n,) = _U64.unpack_from(self._buf, off)
                out.append(bytes(self._buf[off + 8 : off + 8 + n]).decode("utf-8", "replace"))
                off += 8 + n
            return out
        arr = self.array_numpy()
        return [bool(x) for x in arr] if self.elem_type == ValueType.BOOL else arr.tolist()

    def array_numpy(self) -> np.ndarray:
        """Numeric arrays decoded in one call (not for string arrays)."""
        assert self.elem_type is not None and self.count is not None
        dtype = np.dtype(NUMPY_DTYPES[self.elem_type])
        return np.frombuffer(self._buf, dtype=dtype, count=self.count, offset=self.value_start + 12)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor-info record: ``offset`` is relative to the data section."""

    name: str
    dims: tuple[int, ...]
    type: int  # raw value: an unknown type must still be reportable
    offset: int
    start: int
    end: int
    _buf: Any

    @property
    def raw(self) -> bytes:
        return bytes(self._buf[self.start : self.end])

    @property
    def type_known(self) -> bool:
        return self.type in BLOCK_SIZES.keys()

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Data size in bytes (0 for an unknown type)."""
        if not self.type_known:
            return 0
        block, size = BLOCK_SIZES[TensorType(self.type)]
        return self.n_elements // block * size

    @property
    def type_name(self) -> str:
        return TensorType(self.type).name if self.type_known else f"unknown({self.type})"


@dataclass
class GGUFHeader:
    """Parsed header of one GGUF file."""

    path: Path
    version: int
    kv_list: list[KV]
    tensors: list[TensorInfo]
    header_end: int  # end of the last tensor-info record
    file_size: int
    buf: bytes  # the header bytes [0, header_end)

    @cached_property
    def kvs(self) -> dict[str, KV]:
        """Key -> first KV with that key (duplicates are a validation error)."""
        out: dict[str, KV] = {}
        for kv in self.kv_list:
            out.setdefault(kv.key, kv)
        return out

    def get(self, key: str, default: Any = None) -> Any:
        kv = self.kvs.get(key)
        return default if kv is None else kv.value

    @property
    def alignment(self) -> int:
        """The file's alignment (``general.alignment`` when it is a valid u32)."""
        kv = self.kvs.get(ALIGNMENT_KEY)
        if kv is None or kv.type != ValueType.UINT32:
            return DEFAULT_ALIGNMENT
        return int(kv.value)

    @property
    def data_offset(self) -> int:
        """Start of the data section: the header padded to the alignment, only when the
        file has a tensor (gguf.cpp)."""
        a = self.alignment
        if a <= 0 or a & (a - 1):
            a = DEFAULT_ALIGNMENT
        return pad(self.header_end, a) if self.tensors else self.header_end

    @property
    def architecture(self) -> str | None:
        v = self.get("general.architecture")
        return v if isinstance(v, str) else None

    @cached_property
    def tensor_map(self) -> dict[str, TensorInfo]:
        out: dict[str, TensorInfo] = {}
        for t in self.tensors:
            out.setdefault(t.name, t)
        return out


def _decode_scalar(buf: Any, off: int, vtype: ValueType, end: int) -> Any:
    if vtype == ValueType.STRING:
        (n,) = _U64.unpack_from(buf, off)
        return bytes(buf[off + 8 : off + 8 + n]).decode("utf-8", "replace")
    fmt, _ = SCALAR_FORMATS[vtype]
    return struct.unpack_from(fmt, buf, off)[0]


class _Cursor:
    """Bounds-checked little-endian reads over a bytes-like object."""

    __slots__ = ("buf", "size", "off", "file")

    def __init__(self, buf: Any, size: int, file: str):
        self.buf = buf
        self.size = size
        self.off = 0
        self.file = file

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.off + n > self.size:
            raise GGUFError(
                f"file is truncated: {what} needs {n} bytes but only {self.size - self.off} remain",
                file=self.file,
                offset=self.off,
                code="truncated",
            )

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.off)
        self.off += 4
        return v

    def i32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _I32.unpack_from(self.buf, self.off)
        self.off += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.off)
        self.off += 8
        return v

    def i64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _I64.unpack_from(self.buf, self.off)
        self.off += 8
        return v

    def string_span(self, what: str) -> tuple[int, int]:
        start = self.off
        n = self.u64(f"{what} length")
        if n > MAX_STRING_BYTES:
            raise GGUFError(
                f"{what} claims {n} bytes (limit {MAX_STRING_BYTES})", file=self.file, offset=start, code="bad_string"
            )
        self.need(n, what)
        self.off += n
        return start + 8, start + 8 + n

    def string(self, what: str) -> str:
        a, b = self.string_span(what)
        try:
            return bytes(self.buf[a:b]).decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} is not valid UTF-8", file=self.file, offset=a, code="bad_string") from None


def _value_type(raw: int, cur: _Cursor, where: str, at: int) -> ValueType:
    try:
        return ValueType(raw)
    except ValueError:
        raise GGUFError(
            f"{where} has invalid value type {raw}", file=cur.file, offset=at, code="bad_value_type"
        ) from None


def _skip_value(cur: _Cursor, vtype: ValueType, key: str) -> tuple[ValueType | None, int | None]:
    if vtype == ValueType.STRING:
        cur.string_span(f"value of {key!r}")
        return None, None
    if vtype != ValueType.ARRAY:
        cur.need(SCALAR_FORMATS[vtype][1], f"value of {key!r}")
        cur.off += SCALAR_FORMATS[vtype][1]
        return None, None
    at = cur.off
    etype = _value_type(cur.u32(f"array type of {key!r}"), cur, f"array {key!r}", at)
    count = cur.u64(f"array length of {key!r}")
    if etype == ValueType.ARRAY:
        raise GGUFError(
            f"key {key!r} is a nested array, which llama.cpp does not support",
            file=cur.file,
            offset=at,
            code="nested_array",
        )
    if count > MAX_ARRAY_ELEMENTS:
        raise GGUFError(
            f"array {key!r} claims {count} elements (limit {MAX_ARRAY_ELEMENTS})",
            file=cur.file,
            offset=at,
            code="bad_array",
        )
    if etype == ValueType.STRING:
        buf, size, off = cur.buf, cur.size, cur.off
        unpack = _U64.unpack_from
        for i in range(count):
            if off + 8 > size:
                cur.off = off
                cur.need(8, f"element {i} of {key!r}")
            (n,) = unpack(buf, off)
            off += 8 + n
            if off > size:
                cur.off = off - n
                cur.need(n, f"element {i} of {key!r}")
        cur.off = off
    else:
        cur.need(count * SCALAR_FORMATS[etype][1], f"array {key!r}")
        cur.off += count * SCALAR_FORMATS[etype][1]
    return etype, count


def parse_buffer(buf: Any, size: int, file: str = "<buffer>") -> tuple[int, list[KV], list[TensorInfo], int]:
    """Parse a header from ``buf[:size]``: (version, kvs, tensors, header_end)."""
    cur = _Cursor(buf, size, file)
    cur.need(4, "magic")
    magic = bytes(buf[0:4])
    if magic != MAGIC:
        raise GGUFError(
            f"not a GGUF file (magic is {magic!r}, expected b'GGUF')", file=file, offset=0, code="bad_magic"
        )
    cur.off = 4
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in SUPPORTED_VERSIONS:
            raise GGUFError(
                "big-endian GGUF file: llama.cpp only loads little-endian files", file=file, offset=4, code="big_endian"
            )
        raise GGUFError(
            f"unsupported GGUF version {version} (supported: 2, 3)", file=file, offset=4, code="bad_version"
        )
    n_tensors = cur.i64("tensor count")
    n_kv = cur.i64("KV count")
    # Each KV needs >= 13 bytes and each tensor-info >= 24: counts beyond that are garbage.
    if n_tensors < 0 or n_kv < 0 or n_kv * 13 + n_tensors * 24 > size:
        raise GGUFError(
            f"impossible counts ({n_tensors} tensors, {n_kv} KVs) for a {size}-byte file",
            file=file,
            offset=8,
            code="bad_counts",
        )

    kvs: list[KV] = []
    for i in range(n_kv):
        start = cur.off
        key = cur.string(f"key of KV {i}")
        at = cur.off
        vtype = _value_type(cur.u32(f"type of {key!r}"), cur, f"key {key!r}", at)
        value_start = cur.off
        etype, count = _skip_value(cur, vtype, key)
        kvs.append(KV(key, vtype, start, value_start, cur.off, etype, count, buf))

    tensors: list[TensorInfo] = []
    for i in range(n_tensors):
        start = cur.off
        name = cur.string(f"name of tensor {i}")
        n_dims = cur.u32(f"n_dims of {name!r}")
        if n_dims > 64:
            raise GGUFError(f"tensor {name!r} claims {n_dims} dimensions", file=file, offset=start, code="bad_dims")
        dims = tuple(cur.i64(f"dims of {name!r}") for _ in range(n_dims))
        ttype = cur.i32(f"type of {name!r}")
        offset = cur.u64(f"offset of {name!r}")
        tensors.append(TensorInfo(name, dims, ttype, offset, start, cur.off, buf))
    return version, kvs, tensors, cur.off


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Parse the header of ``path``. Raises ``ModelNotFoundError`` or ``GGUFError``."""
    p = Path(path)
    try:
        f = open(p, "rb")
    except FileNotFoundError:
        raise ModelNotFoundError(f"Model file not found: {p}. Check the path or download the model again.") from None
    except IsADirectoryError:
        raise GGUFError("expected a .gguf file but this is a folder", file=str(p), code="not_a_file") from None
    except OSError as e:
        raise GGUFError(f"cannot open the file: {e.strerror}", file=str(p), code="unreadable") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise GGUFError("file is empty", file=str(p), offset=0, code="truncated")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            version, kvs, tensors, end = parse_buffer(mm, size, str(p))
            header = bytes(mm[:end])
    # Rebind the records to the copied header so the mapping can close.
    for rec in (*kvs, *tensors):
        object.__setattr__(rec, "_buf", header)
    return GGUFHeader(p, version, kvs, tensors, end, size, header)
