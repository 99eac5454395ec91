"""Split a GGUF into a shard set the way ``llama-gguf-split`` does (``mtp-studio split``).

Shard 1 keeps every KV; every shard gets ``split.no`` (u16), ``split.count`` (u16)
and ``split.tensors.count`` (i32); tensor data is copied verbatim, each shard's data
section starting at offset 0. Tensors are grouped in file order: into ``n_shards`` of
equal count (give or take one), at most ``max_tensors`` per shard, or at most ``max_bytes`` of tensor data
per shard (a larger tensor gets a shard of its own), as ``llama-gguf-split``'s
``--split-max-tensors`` and ``--split-max-size`` do. Used to build sharded test models
and by users who need to split a model or a composite (e.g. for a per-file size limit).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from engine.errors import ComposeError
from engine.gguf import codec
from engine.gguf.constants import (
    ALIGNMENT_KEY,
    DEFAULT_ALIGNMENT,
    SPLIT_COUNT,
    SPLIT_NO,
    SPLIT_TENSORS_COUNT,
    ValueType,
    pad,
    shard_name,
)
from engine.gguf.filecopy import Copier, check_outputs, check_space, commit, discard, sweep_stale_partials, temp_path
from engine.gguf.reader import TensorInfo, read_header


def shard_groups(
    tensors: Sequence[TensorInfo],
    n_shards: int | None = None,
    *,
    max_tensors: int | None = None,
    max_bytes: int | None = None,
) -> list[list[TensorInfo]]:
    """The tensors of each shard, in file order; exactly one of the three limits is given."""
    if sum(x is not None for x in (n_shards, max_tensors, max_bytes)) != 1:
        raise ValueError("give exactly one of n_shards, max_tensors and max_bytes")
    n = len(tensors)
    if n_shards is not None:
        if not 1 <= n_shards <= n:
            raise ComposeError(f"cannot split {n} tensors into {n_shards} shards", code="bad_split")
        # sizes differ by at most one, the larger first: no shard is ever left empty
        q, r = divmod(n, n_shards)
        bounds = [i * q + min(i, r) for i in range(n_shards + 1)]
        return [list(tensors[bounds[i] : bounds[i + 1]]) for i in range(n_shards)]
    if max_tensors is not None:
        if max_tensors < 1:
            raise ComposeError("a shard holds at least one tensor", code="bad_split")
        return [list(tensors[i : i + max_tensors]) for i in range(0, n, max_tensors)]
    assert max_bytes is not None
    if max_bytes < 1:
        raise ComposeError("the shard size limit must be at least one byte", code="bad_split")
    groups: list[list[TensorInfo]] = [[]]
    size = 0
    for t in tensors:
        if groups[-1] and size + t.nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    return groups


def split_model(
    path: str | Path,
    n_shards: int | None,
    out_prefix: str | Path,
    *,
    max_tensors: int | None = None,
    max_bytes: int | None = None,
    overwrite: bool = False,
    progress=None,
    cancel: threading.Event | None = None,
) -> list[Path]:
    """Write the shards of ``path`` as ``<out_prefix>-0000i-of-0000n.gguf`` and return
    their paths. Raises :class:`ComposeError` (nothing written; an existing output is
    replaced only with ``overwrite``), :class:`~engine.errors.DiskSpaceError`, or
    :class:`~engine.errors.Cancelled` (temp files removed)."""
    src = read_header(path)
    if SPLIT_COUNT in src.kvs:
        raise ComposeError(f"{Path(path).name} is already a shard", code="already_split")
    groups = shard_groups(src.tensors, n_shards, max_tensors=max_tensors, max_bytes=max_bytes)
    n_shards = len(groups)
    if n_shards > 0xFFFF:  # split.count is a u16
        raise ComposeError(f"{n_shards} shards are too many (at most 65535)", code="bad_split")
    prefix = Path(out_prefix)
    outs = [prefix.with_name(shard_name(prefix.name, i + 1, n_shards)) for i in range(n_shards)]
    check_outputs(outs, [src.path], overwrite)
    for o in outs:
        sweep_stale_partials(o)
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
    except OSError as e:
        discard(temps)
        raise ComposeError(
            f"Writing {e.filename or outs[0]} failed: {e.strerror or e}. Nothing was written.", code="write_failed"
        ) from None
    except BaseException:
        discard(temps)
        raise
    finally:
        os.close(fd)
    return outs
