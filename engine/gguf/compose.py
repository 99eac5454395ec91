"""Compose a target GGUF (one file or a shard set) with a separate MTP head.

The result loads in any llama.cpp build as one model whose NextN layers follow the
trunk, and with ``load_mtp`` off it runs bit-identically to the original target:
every target tensor keeps its bytes and its offset relative to the data section, and
every unchanged KV is copied as raw bytes. Algorithm and facts: GGUF-COMPOSE.md.

:func:`plan` makes every check and decides every byte of metadata without writing
anything; :func:`compose` then streams the data (never a whole tensor in memory) into
temp files, fsyncs, renames, and validates what it wrote.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ComposeError, GGUFError, ModelNotFoundError
from engine.gguf import codec
from engine.gguf.constants import (
    ALIGNMENT_KEY,
    DEFAULT_ALIGNMENT,
    MAX_NAME_BYTES,
    SPLIT_TENSORS_COUNT,
    ValueType,
    pad,
    shard_name,
)
from engine.gguf.families import family
from engine.gguf.filecopy import Copier, check_outputs, check_space, commit, discard, sweep_stale_partials, temp_path
from engine.gguf.pairing import PairingError, Summary, check_pair
from engine.gguf.reader import KV, GGUFHeader, TensorInfo
from engine.gguf.shards import ModelSet, open_set, parse_shard_name
from engine.gguf.validate import PER_LAYER_KEYS, Report, block_index, validate_set

SHARED_TENSORS = ("token_embd.weight", "output.weight", "output_norm.weight")

ProgressFn = Callable[[int, int], None]


@dataclass
class NewTensor:
    name: str  # name in the composite
    src: TensorInfo  # record in the head
    offset: int  # relative offset in the output shard's data section


@dataclass
class ShardPlan:
    src: GGUFHeader
    out: Path
    header: bytes  # complete new header, unpadded
    alignment: int
    new_tensors: list[NewTensor] = field(default_factory=list)

    @property
    def data_offset(self) -> int:
        return pad(len(self.header), self.alignment)

    @property
    def old_data_len(self) -> int:
        if not self.src.tensors:
            return 0
        last = self.src.tensors[-1]
        return last.offset + last.nbytes

    @property
    def size(self) -> int:
        if self.new_tensors:
            last = self.new_tensors[-1]
            return self.data_offset + last.offset + last.src.nbytes
        return self.data_offset + self.old_data_len


@dataclass
class Plan:
    target: ModelSet
    head: GGUFHeader
    architecture: str
    trunk_layers: int
    nextn_layers: int
    shards: list[ShardPlan]
    warnings: list[str] = field(default_factory=list)

    @property
    def outputs(self) -> list[Path]:
        return [s.out for s in self.shards]

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.shards)


@dataclass
class ComposeResult:
    outputs: list[Path]
    architecture: str
    block_count: int
    nextn_layers: int
    tensors_added: int
    bytes_written: int
    warnings: list[str]
    validation: Report

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.validation.valid,
            "outputs": [str(p) for p in self.outputs],
            "architecture": self.architecture,
            "block_count": self.block_count,
            "nextn_layers": self.nextn_layers,
            "tensors_added": self.tensors_added,
            "bytes_written": self.bytes_written,
            "warnings": self.warnings,
            "validation": self.validation.to_json(),
        }


# ------------------------------------------------------------------------ checks
def _open(path: str | Path, what: str) -> ModelSet:
    try:
        ms = open_set(path)
    except ModelNotFoundError:
        raise ComposeError(f"The {what} file was not found: {path}", code="not_found") from None
    except GGUFError as e:
        raise ComposeError(f"The {what} is not a valid GGUF file: {e}", code=e.code) from None
    report, _ = validate_set(ms)
    if not report.valid:
        shown = "; ".join(str(p) for p in report.errors[:5])
        more = f" (and {len(report.errors) - 5} more)" if len(report.errors) > 5 else ""
        raise ComposeError(f"The {what} is not a valid GGUF file: {shown}{more}", code=report.errors[0].code)
    return ms


def _u32(h: GGUFHeader, key: str, what: str, default: int | None = None) -> int:
    kv = h.kvs.get(key)
    if kv is None:
        if default is not None:
            return default
        raise ComposeError(f"The {what} has no {key}", code="missing_key")
    if kv.type != ValueType.UINT32:
        raise ComposeError(f"The {what}'s {key} must be u32, found {kv.type.name.lower()}", code="bad_key_type")
    return int(kv.value)


def _is_per_layer(key: str, arch: str, t: KV, h: KV | None, n_t: int, n_h: int) -> bool:
    if t.type != ValueType.ARRAY or t.count != n_t:
        return False
    if key.removeprefix(f"{arch}.") in PER_LAYER_KEYS:
        return True
    return h is not None and h.type == ValueType.ARRAY and h.count == n_h


def check_compatible(target: ModelSet, head: ModelSet) -> tuple[str, int, int, int, list[str]]:
    """Raise :class:`ComposeError` unless ``head`` is an MTP head for ``target``.
    Returns (architecture, target trunk layers, head trunk layers, NextN layers, warnings)."""
    t, h = target.first, head.first
    warnings: list[str] = []
    arch = t.architecture
    if arch is None:
        raise ComposeError("The target has no general.architecture", code="missing_architecture")
    fam = family(arch)
    if fam is not None and fam.ships != "both":
        raise ComposeError(
            f"{fam.label or arch} heads are not composed: llama.cpp loads them beside their target "
            + (
                "(the head carries output tensors of its own under the names the trunk's already use). "
                if fam.ships == "separate"
                else "(an assistant is a model of its own). "
            )
            + "Attach the head instead: load the model with --mtp external --head FILE.",
            code="separate_head",
        )
    n = _u32(t, f"{arch}.block_count", "target")
    if _u32(t, f"{arch}.nextn_predict_layers", "target", 0):
        raise ComposeError("The target already has NextN (MTP) layers; it needs no head", code="target_has_nextn")
    for _, tensor in target.all_tensors():
        b = block_index(tensor.name)
        if ".nextn." in tensor.name or (b is not None and b >= n):
            raise ComposeError(
                f"The target already has NextN tensors ({tensor.name}); it needs no head", code="target_has_nextn"
            )
    hb = 0
    if h.architecture == arch:  # type errors first: the pairing rule reads these as numbers
        hb = _u32(h, f"{arch}.block_count", "head")
        _u32(h, f"{arch}.nextn_predict_layers", "head", 0)
    try:
        pairing = check_pair(Summary.of_set(target), Summary.of_set(head))
    except PairingError as e:
        raise ComposeError(str(e), code=e.code) from None
    k = pairing.nextn_layers  # the pairing rule passed: same architecture, so hb was read
    head_trunk = hb - k
    if head_trunk != n:
        warnings.append(f"the head was made for a {head_trunk}-layer trunk; the target has {n} (renumbered)")

    for key, tkv in t.kvs.items():
        if not (key.startswith(f"{arch}.") or key.startswith("tokenizer.")):
            continue
        if key in (f"{arch}.block_count", f"{arch}.nextn_predict_layers"):
            continue
        hkv = h.kvs.get(key)
        if _is_per_layer(key, arch, tkv, hkv, n, hb):
            if hkv is None or hkv.type != ValueType.ARRAY or hkv.count != hb:
                raise ComposeError(
                    f"Per-layer array {key} has {tkv.count} entries in the target but the head's is missing or not "
                    f"{hb} long",
                    code="per_layer_mismatch",
                )
            if hkv.elem_type != tkv.elem_type:
                raise ComposeError(
                    f"Per-layer array {key}: element type {tkv.elem_type.name.lower()} in the target, "
                    f"{hkv.elem_type.name.lower()} in the head",
                    code="per_layer_mismatch",
                )
            if head_trunk == n and hkv.value[:n] != tkv.value:
                raise ComposeError(
                    f"Per-layer array {key}: the head's trunk entries differ from the target's",
                    code="per_layer_mismatch",
                )
            continue
        if hkv is None:
            if key.startswith("tokenizer."):
                raise ComposeError(
                    f"The head lacks {key}, so its tokenizer cannot be checked", code="tokenizer_mismatch"
                )
            warnings.append(f"the head lacks {key}")
            continue
        if hkv.raw_value != tkv.raw_value:
            code = "tokenizer_mismatch" if key.startswith("tokenizer.") else "metadata_mismatch"
            raise ComposeError(f"{key} differs between the target and the head", code=code)

    shared = {tensor.name: tensor for _, tensor in target.all_tensors() if tensor.name in SHARED_TENSORS}
    for tensor in h.tensors:
        if tensor.name in SHARED_TENSORS and tensor.name in shared and shared[tensor.name].dims != tensor.dims:
            raise ComposeError(
                f"{tensor.name} has shape {list(tensor.dims)} in the head but {list(shared[tensor.name].dims)} in the "
                "target",
                code="shape_mismatch",
            )
    return arch, n, head_trunk, k, warnings


# ----------------------------------------------------------------------- planning
def _out_paths(target: ModelSet, out: Path) -> list[Path]:
    n = len(target.headers)
    if n == 1:
        if out.suffix != ".gguf":
            raise ComposeError(f"--out must be a .gguf file name, got {out.name}", code="bad_out")
        return [out]
    name = parse_shard_name(out)
    if name is None or name.no != 1 or name.count != n:
        raise ComposeError(
            f"The target has {n} shards, so --out must name the first output shard, like "
            f"{shard_name(out.name.removesuffix('.gguf'), 1, n)}",
            code="bad_out",
        )
    return [out.with_name(shard_name(name.prefix, i, n)) for i in range(1, n + 1)]


def _apply_set_kv(kvs: dict[str, bytes], order: list[str], existing: dict[str, KV], set_kv: Sequence[str]) -> None:
    for spec in set_kv:
        key, vtype, value, elem = codec.parse_set_kv(spec)
        if key.startswith("split.") or key == ALIGNMENT_KEY:
            raise ComposeError(f"--set-kv cannot change {key}: it describes the file layout", code="set_kv_forbidden")
        old = existing.get(key)
        if old is not None and (old.type != vtype or (vtype == ValueType.ARRAY and old.elem_type != elem)):
            raise ComposeError(
                f"--set-kv {key}: the existing key is {codec.type_name(old.type, old.elem_type)}, not "
                f"{codec.type_name(vtype, elem)}",
                code="set_kv_type_mismatch",
            )
        kvs[key] = codec.encode_kv(key, vtype, value, elem)
        if key not in order:
            order.append(key)


def plan(
    target_path: str | Path,
    head_path: str | Path,
    out: str | Path,
    *,
    set_kv: Sequence[str] = (),
    overwrite: bool = False,
) -> Plan:
    """Make every check and lay out every output header; writes nothing."""
    target = _open(target_path, "target")
    head_set = _open(head_path, "head")
    if len(head_set.headers) != 1:
        raise ComposeError("Sharded MTP heads are not supported; heads are small single files", code="sharded_head")
    head = head_set.first
    arch, n, head_trunk, k, warnings = check_compatible(target, head_set)

    # --- the head's NextN tensors, renumbered to follow the target's trunk
    existing = {tensor.name for _, tensor in target.all_tensors()}
    new: list[tuple[str, TensorInfo]] = []
    for tensor in head.tensors:
        if tensor.name in SHARED_TENSORS:
            continue  # the target's copy is used (shape checked above)
        b = block_index(tensor.name)
        if b is None or b < head_trunk or b >= head_trunk + k:
            raise ComposeError(
                f"The head contains {tensor.name}, which is not part of its NextN block(s) "
                f"(blocks {head_trunk}..{head_trunk + k - 1}); only MTP-head files can be composed",
                code="unknown_head_tensor",
            )
        name = f"blk.{n + b - head_trunk}." + tensor.name.split(".", 2)[2]
        if len(name.encode()) > MAX_NAME_BYTES:
            raise ComposeError(
                f"Renamed tensor {name} would be {len(name.encode())} bytes (limit 63)", code="name_too_long"
            )
        if name in existing:
            raise ComposeError(f"Tensor {name} already exists in the target", code="name_collision")
        existing.add(name)
        new.append((name, tensor))
    if not new:
        raise ComposeError("The head has no NextN tensors to add", code="head_without_nextn")

    outs = _out_paths(target, Path(out))
    check_outputs(outs, target.paths + [head.path], overwrite)

    # --- shard 1 metadata: original order, unchanged entries as raw bytes
    first = target.first
    order = [kv.key for kv in first.kv_list]
    kvs = {kv.key: kv.raw for kv in first.kv_list}
    bc_key, nn_key = f"{arch}.block_count", f"{arch}.nextn_predict_layers"
    kvs[bc_key] = codec.encode_kv(bc_key, ValueType.UINT32, n + k)
    for key, tkv in first.kvs.items():
        hkv = head.kvs.get(key)
        if key.startswith(f"{arch}.") and _is_per_layer(key, arch, tkv, hkv, n, head_trunk + k):
            assert hkv is not None and hkv.elem_type is not None
            size = codec.element_size(hkv.elem_type)
            if size is None:  # string arrays: re-encode
                values = tkv.value + hkv.value[head_trunk:]
                kvs[key] = codec.encode_kv(key, ValueType.ARRAY, values, hkv.elem_type)
            else:
                tail = codec.array_body(hkv)[head_trunk * size :]
                kvs[key] = codec.encode_array_raw(key, hkv.elem_type, n + k, codec.array_body(tkv) + tail)
    # head-only {arch}.* keys (nextn_predict_layers, ...) go after the target's last arch key
    last_arch = max((i for i, key in enumerate(order) if key.startswith(f"{arch}.")), default=len(order) - 1)
    inserted = [kv.key for kv in head.kv_list if kv.key.startswith(f"{arch}.") and kv.key not in kvs]
    for key in inserted:
        kvs[key] = head.kvs[key].raw
    order[last_arch + 1 : last_arch + 1] = inserted
    kvs[nn_key] = codec.encode_kv(nn_key, ValueType.UINT32, k)
    _apply_set_kv(kvs, order, first.kvs, set_kv)

    total_tensors = sum(len(h.tensors) for h in target.headers) + len(new)
    sharded = len(target.headers) > 1
    if sharded:
        kvs[SPLIT_TENSORS_COUNT] = codec.encode_kv(SPLIT_TENSORS_COUNT, ValueType.INT32, total_tensors)

    shards: list[ShardPlan] = []
    for i, (h, o) in enumerate(zip(target.headers, outs)):
        alignment = h.alignment if ALIGNMENT_KEY in h.kvs else DEFAULT_ALIGNMENT
        if i == 0:
            sp = ShardPlan(h, o, b"", alignment)
            offset = pad(sp.old_data_len, alignment)
            for name, tensor in new:
                sp.new_tensors.append(NewTensor(name, tensor, offset))
                offset = pad(offset + tensor.nbytes, alignment)
            records = [t.raw for t in h.tensors] + [
                codec.encode_tensor_info(nt.name, nt.src.dims, nt.src.type, nt.offset) for nt in sp.new_tensors
            ]
            meta = [kvs[key] for key in order]
            sp.header = codec.header_prefix(3, len(records), len(meta)) + b"".join(meta) + b"".join(records)
        else:
            meta = [
                codec.encode_kv(SPLIT_TENSORS_COUNT, ValueType.INT32, total_tensors)
                if kv.key == SPLIT_TENSORS_COUNT
                else kv.raw
                for kv in h.kv_list
            ]
            records = [t.raw for t in h.tensors]
            header = codec.header_prefix(3, len(records), len(meta)) + b"".join(meta) + b"".join(records)
            sp = ShardPlan(h, o, header, alignment)
        shards.append(sp)
    return Plan(target, head, arch, n, k, shards, warnings)


# ------------------------------------------------------------------------ writing
def compose(
    target_path: str | Path,
    head_path: str | Path,
    out: str | Path,
    *,
    set_kv: Sequence[str] = (),
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> ComposeResult:
    """Compose and validate. Raises :class:`ComposeError` (nothing written),
    :class:`~engine.errors.DiskSpaceError`, or :class:`Cancelled` (temp files removed)."""
    p = plan(target_path, head_path, out, set_kv=set_kv, overwrite=overwrite)
    for o in p.outputs:
        sweep_stale_partials(o)
    check_space(p.outputs[0].parent, p.total_bytes)
    temps = [temp_path(o) for o in p.outputs]
    copier = Copier(p.total_bytes, progress, cancel)
    try:
        head_fd = os.open(p.head.path, os.O_RDONLY)
        try:
            for sp, tmp in zip(p.shards, temps):
                _write_shard(sp, tmp, head_fd, p.head.data_offset, copier)
        finally:
            os.close(head_fd)
        commit(temps, p.outputs)
    except OSError as e:
        discard(temps)
        raise ComposeError(
            f"Writing {e.filename or p.outputs[0]} failed: {e.strerror or e}. Nothing was written.", code="write_failed"
        ) from None
    except BaseException:
        discard(temps)
        raise
    report = verify(p)
    if not report.valid:
        discard(p.outputs)
        raise ComposeError(
            "The composed model failed validation and was removed: " + "; ".join(str(e) for e in report.errors[:3]),
            code="output_invalid",
        )
    added = sum(len(s.new_tensors) for s in p.shards)
    return ComposeResult(
        p.outputs,
        p.architecture,
        p.trunk_layers + p.nextn_layers,
        p.nextn_layers,
        added,
        copier.done,
        p.warnings,
        report,
    )


def _write_shard(sp: ShardPlan, tmp: Path, head_fd: int, head_data: int, copier: Copier) -> None:
    src_fd = os.open(sp.src.path, os.O_RDONLY)
    dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        copier.write(dst, sp.header)
        copier.zeros(dst, sp.data_offset - len(sp.header))
        available = max(0, sp.src.file_size - sp.src.data_offset)
        n_old = min(sp.old_data_len, available)
        copier.copy(src_fd, sp.src.data_offset, dst, n_old)
        written = n_old
        for nt in sp.new_tensors:
            copier.zeros(dst, nt.offset - written)
            copier.copy(head_fd, head_data + nt.src.offset, dst, nt.src.nbytes)
            written = nt.offset + nt.src.nbytes
        if sp.new_tensors:
            copier.zeros(dst, pad(written, sp.alignment) - written)
    finally:
        os.close(dst)
        os.close(src_fd)


def verify(p: Plan) -> Report:
    """Validate the written set, and check every target tensor kept its name, shape,
    type and relative offset."""
    try:
        ms = open_set(p.outputs[0])
    except (GGUFError, ModelNotFoundError) as e:
        r = Report(files=[str(o) for o in p.outputs])
        r.error(getattr(e, "code", "invalid"), str(e), str(p.outputs[0]))
        return r
    report, facts = validate_set(ms)
    for src, dst in zip(p.target.headers, ms.headers):
        got = {t.name: t for t in dst.tensors}
        for t in src.tensors:
            d = got.get(t.name)
            if d is None or (d.dims, d.type, d.offset) != (t.dims, t.type, t.offset):
                report.error("target_tensor_changed", f"target tensor {t.name} changed in the output", str(dst.path))
    if facts.nextn_layers != p.nextn_layers:
        report.error(
            "bad_nextn", f"output has {facts.nextn_layers} NextN layers, expected {p.nextn_layers}", str(p.outputs[0])
        )
    return report


def sha256_of_tensor(path: Path, header: GGUFHeader, tensor: TensorInfo) -> str:
    """Hash of one tensor's bytes (streamed)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(header.data_offset + tensor.offset)
        left = tensor.nbytes
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                raise OSError(f"{path} ends inside tensor {tensor.name}")
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()
