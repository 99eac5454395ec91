"""Writing deliberately malformed or edited GGUF files for tests (raw records)."""

from __future__ import annotations

import struct
from pathlib import Path

from engine.gguf import codec
from engine.gguf.constants import ValueType, pad
from engine.gguf.reader import read_header


def write_raw(
    path: Path,
    kvs: list[bytes],
    tensors: list[tuple[str, tuple[int, ...], int, int]],
    data: bytes,
    *,
    version: int = 3,
    alignment: int = 32,
    big_endian: bool = False,
) -> Path:
    records = [codec.encode_tensor_info(*t) for t in tensors]
    header = codec.header_prefix(version, len(records), len(kvs)) + b"".join(kvs) + b"".join(records)
    if big_endian:
        header = b"GGUF" + struct.pack(">I", version) + header[8:]
    body = header + bytes(pad(len(header), alignment) - len(header)) if tensors else header
    path.write_bytes(body + data)
    return path


def f32_tensor_file(path: Path, specs: list[tuple[str, tuple[int, ...]]], extra_kvs: list[bytes] = (), **kw) -> Path:
    """A valid file of F32 tensors laid out contiguously."""
    kvs = [codec.encode_kv("general.architecture", ValueType.STRING, "llama"), *extra_kvs]
    tensors, off = [], 0
    for name, dims in specs:
        n = 1
        for d in dims:
            n *= d
        tensors.append((name, dims, 0, off))
        off = pad(off + 4 * n, 32)
    return write_raw(path, kvs, tensors, bytes(off), **kw)


def edit(
    src: Path,
    dst: Path,
    *,
    set_kvs: dict[str, bytes] | None = None,
    drop_kvs: tuple[str, ...] = (),
    rename: dict[str, str] | None = None,
    add_tensor: tuple[str, tuple[int, ...]] | None = None,
) -> Path:
    """Copy ``src`` with metadata edits, keeping tensor data and layout."""
    h = read_header(src)
    set_kvs = dict(set_kvs or {})
    kvs = []
    for kv in h.kv_list:
        if kv.key in drop_kvs:
            continue
        kvs.append(set_kvs.pop(kv.key, kv.raw))
    kvs += list(set_kvs.values())
    tensors = [((rename or {}).get(t.name, t.name), t.dims, t.type, t.offset) for t in h.tensors]
    raw = src.read_bytes()
    data = raw[h.data_offset :]
    if add_tensor is not None:
        name, dims = add_tensor
        last = h.tensors[-1]
        off = pad(last.offset + last.nbytes, h.alignment)
        n = 1
        for d in dims:
            n *= d
        data = data + bytes(off - len(data)) + bytes(4 * n) if off >= len(data) else data[:off] + bytes(4 * n)
        tensors.append((name, dims, 0, off))
    return write_raw(dst, kvs, tensors, data, alignment=h.alignment)


def kv(key: str, vtype: ValueType, value, elem: ValueType | None = None) -> bytes:
    return codec.encode_kv(key, vtype, value, elem)
