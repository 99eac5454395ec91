"""Split a GGUF into a shard set the way ``llama-gguf-split`` does.

Shard 1 keeps every KV; every shard gets ``split.no`` (u16), ``split.count`` (u16)
and ``split.tensors.count`` (i32); tensor data is copied verbatim, each shard's data
section starting at offset 0. Used to build sharded test models and by users who
need to split a composite.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from engine.errors import ComposeError
from engine.gguf import codec
from engine.gguf.constants import ALIGNMENT_KEY, DEFAULT_ALIGNMENT, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT, ValueType, pad, shard_name
from engine.gguf.filecopy import Copier, check_space, commit, discard, temp_path
from engine.gguf.reader import read_header


def split_model(
    path: str | Path,
    n_shards: int,
    out_prefix: str | Path,
    *,
    progress=None,
    cancel: threading.Event | None = None,
) -> list[Path]:
    src = read_header(path)
    if SPLIT_COUNT in src.kvs:
        raise ComposeError(f"{Path(path).name} is already a shard", code="already_split")
    if not 1 <= n_shards <= len(src.tensors):
        raise ComposeError(f"cannot split {len(src.tensors)} tensors into {n_shards} shards", code="bad_split")
    prefix = Path(out_prefix)
    outs = [prefix.with_name(shard_name(prefix.name, i + 1, n_shards)) for i in range(n_shards)]
    per = -(-len(src.tensors) // n_shards)
    groups = [src.tensors[i * per : (i + 1) * per] for i in range(n_shards)]
    check_space(outs[0].parent, src.file_size + n_shards * 4096)
    temps = [temp_path(o) for o in outs]
    copier = Copier(src.file_size, progress, cancel)
    fd = os.open(src.path, os.O_RDONLY)
    try:
        for i, (group, tmp) in enumerate(zip(groups, temps)):
            split_kvs = [
                codec.encode_kv(SPLIT_NO, ValueType.UINT16, i),
                codec.encode_kv(SPLIT_COUNT, ValueType.UINT16, n_shards),
                codec.encode_kv(SPLIT_TENSORS_COUNT, ValueType.INT32, len(src.tensors)),
            ]
            meta = ([kv.raw for kv in src.kv_list] if i == 0 else []) + split_kvs
            alignment = src.alignment if (i == 0 and ALIGNMENT_KEY in src.kvs) else DEFAULT_ALIGNMENT
            records, offset, layout = [], 0, []
            for t in group:
                records.append(codec.encode_tensor_info(t.name, t.dims, t.type, offset))
                layout.append((t, offset))
                offset = pad(offset + t.nbytes, alignment)
            header = codec.header_prefix(3, len(records), len(meta)) + b"".join(meta) + b"".join(records)
            dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                copier.write(dst, header)
                copier.zeros(dst, pad(len(header), alignment) - len(header))
                written = 0
                for t, off in layout:
                    copier.zeros(dst, off - written)
                    copier.copy(fd, src.data_offset + t.offset, dst, t.nbytes)
                    written = off + t.nbytes
                copier.zeros(dst, pad(written, alignment) - written)
            finally:
                os.close(dst)
        commit(temps, outs)
    except BaseException:
        discard(temps)
        raise
    finally:
        os.close(fd)
    return outs
