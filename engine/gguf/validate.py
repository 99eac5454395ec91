"""Structural validation of GGUF files and shard sets, before llama.cpp sees them.

llama.cpp aborts the whole process on some malformed inputs instead of returning an
error, so every check it makes on a header is made here first, with a message that says
what is wrong and where. Semantic checks that need llama.cpp itself run in a child
process (:mod:`engine.runtime.load.filecheck`).
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.errors import GGUFError, ModelNotFoundError
from engine.gguf.constants import (
    ALIGNMENT_KEY,
    ARCH_KEY,
    BLOCK_SIZES,
    DEFAULT_ALIGNMENT,
    MAX_DIMS,
    MAX_NAME_BYTES,
    SHARD_PATTERN,
    SPLIT_COUNT,
    SPLIT_KEYS,
    SPLIT_NO,
    SPLIT_TENSORS_COUNT,
    TensorType,
    ValueType,
    pad,
)
from engine.gguf.families import drafts, family, is_head_root_tensor
from engine.gguf.reader import GGUFHeader
from engine.gguf.report import MtpFacts, Problem, Report
from engine.gguf.shards import ModelSet, open_set, parse_shard_name

#: ``{arch}.`` keys that llama.cpp reads with a strict type (a wrong type can abort)
STRICT_ARCH_KEYS: dict[str, tuple[ValueType, ...]] = {
    "block_count": (ValueType.UINT32,),
    "nextn_predict_layers": (ValueType.UINT32,),
    "context_length": (ValueType.UINT32,),
    "embedding_length": (ValueType.UINT32,),
}

#: ``{arch}.`` keys that may be per-layer arrays: when they are arrays, they must have
#: exactly ``block_count`` entries (``get_key_or_arr``)
PER_LAYER_KEYS = (
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "expert_used_count",
    "expert_feed_forward_length",
    "attention.recurrent_layers",
    "attention.sliding_window_pattern",
    "swiglu_clamp_exp",
    "swiglu_clamp_shexp",
)

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")

#: a projector (engine.gguf.projector) given where a text model belongs
PROJECTOR_NOT_MODEL = (
    "this file is a multimodal projector (mmproj), not a text model: load the model it belongs to and give this "
    "file as its projector"
)


__all__ = ["MtpFacts", "Problem", "Report", "validate_path", "validate_set", "nextn_missing_problem"]


def block_index(name: str) -> int | None:
    m = _BLOCK_RE.match(name)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------- per file
def check_file(h: GGUFHeader, report: Report) -> None:
    """Every check gguf.cpp makes on a single file's header."""
    f = str(h.path)
    seen: set[str] = set()
    for kv in h.kv_list:
        if not kv.key:
            report.error("empty_key", f"a KV has an empty key (offset {kv.start})", f)
        elif kv.key in seen:
            report.error("duplicate_key", f"key {kv.key!r} appears more than once (offset {kv.start})", f)
        seen.add(kv.key)

    align_kv = h.kvs.get(ALIGNMENT_KEY)
    alignment = DEFAULT_ALIGNMENT
    if align_kv is not None:
        if align_kv.type != ValueType.UINT32:
            report.error("bad_alignment", f"{ALIGNMENT_KEY} must be u32, found {align_kv.type.name}", f)
        else:
            a = int(align_kv.value)
            if a <= 0 or a & (a - 1):
                report.error("bad_alignment", f"{ALIGNMENT_KEY} is {a}, which is not a power of two", f)
            else:
                alignment = a

    names: set[str] = set()
    expected = 0
    data_offset = pad(h.header_end, alignment) if h.tensors else h.header_end
    for t in h.tensors:
        where = f"tensor {t.name!r} (record at offset {t.start})"
        if len(t.name.encode("utf-8")) > MAX_NAME_BYTES:
            report.error("name_too_long", f"{where}: name is {len(t.name.encode())} bytes, the limit is 63", f)
        if t.name in names:
            report.error("duplicate_tensor", f"{where}: a tensor with this name already exists", f)
        names.add(t.name)
        if len(t.dims) > MAX_DIMS:
            report.error("bad_dims", f"{where}: {len(t.dims)} dimensions, the limit is {MAX_DIMS}", f)
        if any(d < 0 for d in t.dims):
            report.error("bad_dims", f"{where}: negative dimension in {list(t.dims)}", f)
        if not t.type_known:
            report.error("bad_tensor_type", f"{where}: invalid tensor type {t.type}", f)
            continue
        block, _ = BLOCK_SIZES[TensorType(t.type)]
        if t.dims and t.dims[0] % block:
            report.error(
                "bad_block_size",
                f"{where}: first dimension {t.dims[0]} is not a multiple of {t.type_name}'s block size {block}",
                f,
            )
        if t.offset != expected:
            report.error(
                "bad_offset",
                f"{where}: data offset is {t.offset}, expected {expected} "
                "(tensors must be contiguous, in table order, padded to the alignment)",
                f,
            )
        end = data_offset + t.offset + t.nbytes
        if end > h.file_size:
            report.error(
                "data_out_of_bounds",
                f"{where}: data ends at byte {end} but the file has {h.file_size} bytes (truncated?)",
                f,
            )
        expected = pad(max(expected, t.offset) + t.nbytes, alignment)


def check_arch_keys(h: GGUFHeader, report: Report) -> MtpFacts:
    """Arch-level keys llama.cpp reads strictly; returns the MTP facts of the file."""
    f = str(h.path)
    facts = MtpFacts()
    arch_kv = h.kvs.get(ARCH_KEY)
    if arch_kv is None:
        report.error("missing_architecture", f"{ARCH_KEY} is missing", f)
        return facts
    if arch_kv.type != ValueType.STRING:
        report.error("bad_key_type", f"{ARCH_KEY} must be a string", f)
        return facts
    arch = str(arch_kv.value)
    facts.architecture = arch
    facts.arch_supported = drafts(arch)

    for suffix, types in STRICT_ARCH_KEYS.items():
        kv = h.kvs.get(f"{arch}.{suffix}")
        if kv is not None and kv.type not in types:
            want = " or ".join(t.name.lower() for t in types)
            report.error("bad_key_type", f"{arch}.{suffix} must be {want}, found {kv.type.name.lower()}", f)

    bc_kv = h.kvs.get(f"{arch}.block_count")
    if bc_kv is None:
        report.error("missing_key", f"{arch}.block_count is missing", f)
        return facts
    if bc_kv.type != ValueType.UINT32:
        return facts
    block_count = int(bc_kv.value)
    facts.block_count = block_count
    if block_count == 0:
        report.error("bad_block_count", f"{arch}.block_count is 0", f)
    nn_kv = h.kvs.get(f"{arch}.nextn_predict_layers")
    nextn = int(nn_kv.value) if nn_kv is not None and nn_kv.type == ValueType.UINT32 else 0
    if nextn > block_count:
        report.error(
            "bad_nextn", f"{arch}.nextn_predict_layers ({nextn}) exceeds {arch}.block_count ({block_count})", f
        )
        nextn = 0
    facts.nextn_layers = nextn
    facts.trunk_layers = block_count - nextn

    for suffix in PER_LAYER_KEYS:
        kv = h.kvs.get(f"{arch}.{suffix}")
        if kv is not None and kv.type == ValueType.ARRAY and kv.count != block_count:
            report.error(
                "bad_array_length",
                f"{arch}.{suffix} has {kv.count} entries but block_count is {block_count}; "
                "every per-layer array must have one entry per block",
                f,
            )
    check_rope(h, arch, report)
    check_recurrent(h, arch, report)
    return facts


def check_recurrent(h: GGUFHeader, arch: str, report: Report) -> None:
    """A hybrid family's file with no recurrent block: llama.cpp loads it and then
    aborts at the first decode (``GGML_ASSERT(buffer)``, no recurrent state to allocate)."""
    fam = family(arch)
    if fam is None or not fam.hybrid:
        return
    kv = h.kvs.get(f"{arch}.full_attention_interval")
    if kv is not None and kv.type == ValueType.UINT32 and int(kv.value) == 1:
        report.error(
            "no_recurrent_blocks",
            f"{arch}.full_attention_interval is 1, so every block is an attention block and none is recurrent; "
            f"{arch} is a hybrid architecture and llama.cpp aborts at the first decode of such a file. "
            "The file's metadata is wrong: download or convert it again",
            str(h.path),
        )


def _first_int(kv) -> int | None:
    """A scalar integer key, or the first entry of a per-layer array."""
    if kv is None:
        return None
    if kv.type == ValueType.ARRAY:
        try:
            values = [int(v) for v in kv.value]
        except (TypeError, ValueError):
            return None
        return max(values) if values else None
    try:
        return int(kv.value)
    except (TypeError, ValueError):
        return None


def check_rope(h: GGUFHeader, arch: str, report: Report) -> None:
    """``rope.dimension_count`` must be even and at most the head size: llama.cpp
    asserts both in the first decode (``n_dims % 2 == 0``, ``n_dims <= ne0``), long
    after a load has succeeded."""
    f = str(h.path)
    n_rot = _first_int(h.kvs.get(f"{arch}.rope.dimension_count"))
    if n_rot is None:
        return
    if n_rot % 2:
        report.error(
            "bad_rope_dims",
            f"{arch}.rope.dimension_count is {n_rot}, an odd number; rotary embeddings rotate pairs of "
            "dimensions, so llama.cpp would abort on the first decode. The file's metadata is damaged: "
            "download or convert it again",
            f,
        )
        return
    head_k = _first_int(h.kvs.get(f"{arch}.attention.key_length"))
    if head_k is None:
        n_embd = _first_int(h.kvs.get(f"{arch}.embedding_length"))
        n_head = _first_int(h.kvs.get(f"{arch}.attention.head_count"))
        if n_embd and n_head:
            head_k = n_embd // n_head
    if head_k and n_rot > head_k:
        report.error(
            "bad_rope_dims",
            f"{arch}.rope.dimension_count is {n_rot} but an attention head has only {head_k} dimensions; "
            "llama.cpp would abort on the first decode. The file's metadata is damaged: download or convert it again",
            f,
        )


def check_mtp_tensors(ms: ModelSet, facts: MtpFacts, report: Report) -> None:
    """NextN tensors exist exactly for the last ``nextn_predict_layers`` blocks."""
    if facts.block_count is None:
        return
    f = str(ms.first.path)
    trunk = facts.trunk_layers or 0
    blocks_with_nextn: set[int] = set()
    blocks: set[int] = set()
    names: set[str] = set()
    for h, t in ms.all_tensors():
        names.add(t.name)
        b = block_index(t.name)
        if b is None:
            if "nextn." in t.name and not is_head_root_tensor(facts.architecture, t.name):
                report.error(
                    "unknown_tensor", f"tensor {t.name!r} looks like a NextN tensor outside any block", str(h.path)
                )
            continue
        blocks.add(b)
        if b >= facts.block_count:
            report.error(
                "tensor_beyond_blocks",
                f"tensor {t.name!r} belongs to block {b} but block_count is {facts.block_count}",
                str(h.path),
            )
        if ".nextn." in t.name:
            blocks_with_nextn.add(b)
            if b < trunk:
                report.error(
                    "nextn_in_trunk",
                    f"tensor {t.name!r} is a NextN tensor in trunk block {b} (NextN blocks are the last "
                    f"{facts.nextn_layers} of {facts.block_count})",
                    str(h.path),
                )
    fam = family(facts.architecture)
    if facts.nextn_layers and fam is not None and fam.ships == "assistant":
        # an assistant: its blocks are plain decoder blocks, all of them drafting
        if facts.nextn_layers != facts.block_count:
            report.error(
                "bad_nextn",
                f"{facts.architecture}.nextn_predict_layers is {facts.nextn_layers} but every block of an assistant "
                f"drafts: it must equal block_count ({facts.block_count})",
                f,
            )
        facts.kind = "assistant"
        return
    if facts.nextn_layers:
        missing = [b for b in range(trunk, facts.block_count) if b not in blocks_with_nextn]
        has_trunk = any(b < trunk for b in blocks)
        if len(missing) == facts.nextn_layers and has_trunk and not any(b >= trunk for b in blocks):
            # llama.cpp's converter with --no-mtp: the trunk declares its NextN layers and a
            # separate mtp- file holds them; llama.cpp loads it (drafting needs the head)
            facts.kind = "trunk-only"
            if fam is None or not fam.trunk_only:
                report.error(
                    "trunk_only_unsupported",
                    f"this {facts.architecture} file declares {facts.nextn_layers} NextN layer(s) but holds "
                    f"none of their "
                    f"tensors, and llama.cpp loads such a trunk only for the families whose loaders allow it. Compose "
                    "it with its mtp- head first (compose), or use a file converted with its MTP layers",
                    f,
                )
            return
        if missing:
            report.error(
                "missing_nextn_tensors",
                f"nextn_predict_layers is {facts.nextn_layers} but block(s) {missing} have no NextN tensors",
                f,
            )
        facts.kind = "integrated" if has_trunk else "head-only"
        problem = fam.nextn_problem(facts.nextn_layers) if fam is not None and fam.graph else None
        if problem:
            # it loads with MTP off; the loader refuses MTP on it, in these words
            report.warn("bad_nextn", problem, f)
        if fam is not None and fam.graph:
            facts.nextn_missing = tuple(
                f"blk.{b}.{suffix}"
                for b in range(trunk, facts.block_count)
                for suffix in fam.nextn_requires
                if f"blk.{b}.{suffix}" not in names
            )
            if facts.nextn_missing:
                report.warn("nextn_incomplete", nextn_missing_problem(facts), f)
    elif blocks_with_nextn:
        report.error(
            "undeclared_nextn",
            f"NextN tensors found in block(s) {sorted(blocks_with_nextn)} but nextn_predict_layers is 0/absent",
            f,
        )


def nextn_missing_problem(facts: MtpFacts) -> str:
    """Why a file whose NextN blocks lack what the MTP graph asserts on cannot draft."""
    shown = ", ".join(facts.nextn_missing[:3]) + (" ..." if len(facts.nextn_missing) > 3 else "")
    return (
        f"llama.cpp's {facts.architecture} MTP graph needs {shown}, which this file's NextN block(s) lack; drafting "
        "would abort the process. Load it with MTP off, or use a file converted with its full MTP layers."
    )


# -------------------------------------------------------------------- shard set
def check_set(ms: ModelSet, report: Report) -> None:
    first = ms.first
    f = str(first.path)
    n = len(ms.headers)
    if n == 1 and SPLIT_COUNT not in first.kvs:
        for key in SPLIT_KEYS:
            if key in first.kvs:
                report.error("stray_split_key", f"{key} is set but the file is not part of a split set", f)
        return
    for i, h in enumerate(ms.headers):
        hf = str(h.path)
        for key, want in (
            (SPLIT_NO, ValueType.UINT16),
            (SPLIT_COUNT, ValueType.UINT16),
            (SPLIT_TENSORS_COUNT, ValueType.INT32),
        ):
            kv = h.kvs.get(key)
            if kv is None:
                report.error("missing_split_key", f"{key} is missing", hf)
            elif kv.type != want:
                report.error("bad_key_type", f"{key} must be {want.name.lower()}, found {kv.type.name.lower()}", hf)
        no = h.get(SPLIT_NO)
        if isinstance(no, int) and no != i:
            report.error("bad_split_no", f"split.no is {no} but this is shard {i + 1} (split.no {i} expected)", hf)
        count = h.get(SPLIT_COUNT)
        if isinstance(count, int) and count != n:
            report.error("bad_split_count", f"split.count is {count} but the set has {n} files", hf)
        if i > 0:
            globals_here = [kv.key for kv in h.kv_list if kv.key not in SPLIT_KEYS and kv.key != ALIGNMENT_KEY]
            extra = [k for k in globals_here if k != ARCH_KEY]
            if extra:
                report.warn(
                    "kv_outside_first_shard",
                    f"{len(extra)} metadata key(s) outside shard 1 are ignored by llama.cpp (e.g. {extra[0]!r})",
                    hf,
                )
    total = sum(len(h.tensors) for h in ms.headers)
    declared = first.get(SPLIT_TENSORS_COUNT)
    if isinstance(declared, int) and declared != total:
        report.error(
            "bad_split_tensor_count",
            f"split.tensors.count is {declared} but the shards hold {total} tensors",
            f,
        )
    owner: dict[str, str] = {}
    for h, t in ms.all_tensors():
        if t.name in owner and owner[t.name] != str(h.path):
            report.error(
                "tensor_in_two_shards",
                f"tensor {t.name!r} is in both {Path(owner[t.name]).name} and {h.path.name}",
                str(h.path),
            )
        owner.setdefault(t.name, str(h.path))
    # a stray shard with the same prefix but another count or number
    name = parse_shard_name(first.path)
    if name is not None:
        for sib in first.path.parent.glob(f"{name.prefix}-*-of-*.gguf"):
            m = SHARD_PATTERN.match(sib.name)
            if m and m["prefix"] == name.prefix and sib not in ms.paths:
                report.error(
                    "extra_shard", f"{sib.name} looks like part of this set but is not one of its {n} shards", f
                )


# ------------------------------------------------------------------------ entry
def validate_set(ms: ModelSet) -> tuple[Report, MtpFacts]:
    report = Report(files=[str(p) for p in ms.paths])
    for h in ms.headers:
        check_file(h, report)
    check_set(ms, report)
    if ms.first.architecture == "clip":  # an mmproj given as a model: one clear error, not key noise
        report.error("projector_not_model", PROJECTOR_NOT_MODEL, str(ms.first.path))
        report.mtp = {"architecture": ms.first.architecture, "kind": "none", "arch_supported": False}
        return report, MtpFacts(architecture=ms.first.architecture)
    facts = check_arch_keys(ms.first, report)
    check_mtp_tensors(ms, facts, report)
    report.mtp = {
        "architecture": facts.architecture,
        "block_count": facts.block_count,
        "nextn_layers": facts.nextn_layers,
        "kind": facts.kind,
        "arch_supported": facts.arch_supported,
    }
    return report, facts


def validate_path(path: str | Path) -> tuple[Report, MtpFacts, ModelSet | None]:
    """Validate a file or shard set. Parse errors become report errors too."""
    try:
        ms = open_set(path)
    except GGUFError as e:
        report = Report(files=[str(path)])
        report.error(
            e.code, e.bare_message + (f" at offset {e.offset}" if e.offset is not None else ""), e.file or str(path)
        )
        return report, MtpFacts(), None
    except ModelNotFoundError as e:
        report = Report(files=[str(path)])
        report.error(e.code, str(e), str(path))
        return report, MtpFacts(), None
    report, facts = validate_set(ms)
    return report, facts, ms
