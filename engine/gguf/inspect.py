"""A summary of a GGUF model, or of a multimodal projector (:func:`inspect_projector`),
from its headers alone (no llama.cpp, no tensor data)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from engine.gguf.chatformat import header_chat_format
from engine.gguf.filetype import quantization
from engine.gguf.projector import facts_of
from engine.gguf.reader import read_header
from engine.gguf.shards import ModelSet, open_set
from engine.gguf.validate import MtpFacts, validate_set


def summarize(ms: ModelSet, facts: MtpFacts | None = None) -> dict[str, Any]:
    if facts is None:
        _, facts = validate_set(ms)
    h = ms.first
    arch = h.architecture or "?"
    types: Counter[str] = Counter()
    type_bytes: Counter[str] = Counter()
    params = 0
    for _, t in ms.all_tensors():
        types[t.type_name] += 1
        type_bytes[t.type_name] += t.nbytes
        params += t.n_elements
    tokens = h.kvs.get("tokenizer.ggml.tokens")
    merges = h.kvs.get("tokenizer.ggml.merges")
    mtp_kind = facts.kind
    largest = type_bytes.most_common(1)[0][0] if type_bytes else None
    quant, quant_source = quantization(h, largest)
    return {
        "path": str(h.path),
        "architecture": arch,
        "name": h.get("general.name"),
        "size_bytes": ms.total_size,
        "parameters": params,
        "tensors": sum(len(x.tensors) for x in ms.headers),
        "quant_types": dict(types.most_common()),
        "quantization": quant,
        "quantization_source": quant_source,
        "main_quant_type": largest,
        "context_length": h.get(f"{arch}.context_length"),
        "embedding_length": h.get(f"{arch}.embedding_length"),
        "block_count": facts.block_count,
        "nextn_layers": facts.nextn_layers,
        "mtp": {
            "has_mtp": facts.nextn_layers > 0,
            "kind": mtp_kind,  # none | integrated | head-only
            "arch_supported": facts.arch_supported,
        },
        "shards": [str(p) for p in ms.paths],
        "tokenizer": {
            "model": h.get("tokenizer.ggml.model"),
            "pre": h.get("tokenizer.ggml.pre"),
            "vocab_size": tokens.count if tokens is not None else None,
            "merges": merges.count if merges is not None else None,
            "bos_token_id": h.get("tokenizer.ggml.bos_token_id"),
            "eos_token_id": h.get("tokenizer.ggml.eos_token_id"),
            "chat_template": h.get("tokenizer.chat_template") is not None,
            "chat_format": header_chat_format(h),
            "add_bos": h.get("tokenizer.ggml.add_bos_token"),
        },
    }


def inspect_path(path: str | Path) -> dict[str, Any]:
    """Summary of ``path`` (shard 1 of a set for sharded models). Raises typed errors."""
    return summarize(open_set(path))


def inspect_projector(path: str | Path) -> dict[str, Any]:
    """Summary of a projector (``mmproj-*.gguf``): what it reads, the width of the
    embeddings it makes, its encoders' sizes. Raises typed errors
    (:func:`engine.gguf.projector.read_projector`'s)."""
    h = read_header(path)
    facts = facts_of(h)
    types: Counter[str] = Counter(t.type_name for t in h.tensors)
    encoders = {}
    for m in facts.modalities:
        encoders[m] = {
            key: h.get(f"clip.{m}.{key}")
            for key in ("embedding_length", "block_count", "attention.head_count", "feed_forward_length")
        }
    return facts.to_json() | {
        "kind": "projector",
        "architecture": h.architecture,
        "size_bytes": h.file_size,
        "tensors": len(h.tensors),
        "parameters": sum(t.n_elements for t in h.tensors),
        "quant_types": dict(types.most_common()),
        "encoders": encoders,
    }


def format_projector(s: dict[str, Any]) -> str:
    kinds = [t for t in (s["projector_type"], s["audio_projector_type"]) if t]
    lines = [
        f"file          {s['path']}",
        f"architecture  {s['architecture']} (a multimodal projector: load it with its text model)",
        f"name          {s['name']}",
        f"size          {human_size(s['size_bytes'])}, {s['tensors']} tensors, {human_count(s['parameters'])} "
        "parameters (" + ", ".join(f"{k}: {v}" for k, v in s["quant_types"].items()) + ")",
        f"projector     {' + '.join(kinds)}",
        f"reads         {', '.join(s['modalities'])}",
        f"output width  {s['output_width']} (the text model's input embedding width must match)",
    ]
    if s["image_size"] is not None:
        lines.append(f"images        {s['patch_size']} px patches, image size {s['image_size']} px")
    for m, e in s["encoders"].items():
        lines.append(
            f"{m + ':':<14}encoder of {e['block_count']} block(s), width {e['embedding_length']}, "
            f"{e['attention.head_count']} heads"
        )
    return "\n".join(lines)


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def human_count(n: int) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def _yes_no(v) -> str:
    return "not stated" if v is None else ("yes" if v else "no")


def format_summary(s: dict[str, Any]) -> str:
    mtp = s["mtp"]
    mtp_line = {
        "none": "no",
        "integrated": f"yes, integrated ({s['nextn_layers']} NextN layer(s))",
        "head-only": f"head only ({s['nextn_layers']} NextN layer(s); compose it with its target)",
        "assistant": (
            f"an assistant: a drafter for another model ({s['nextn_layers']} layer(s); load it as that model's head)"
        ),
        "trunk-only": (
            f"trunk only ({s['nextn_layers']} NextN layer(s) declared; their head ships as a separate mtp- file)"
        ),
    }[mtp["kind"]]
    tok = s["tokenizer"]
    lines = [
        f"file          {s['path']}",
        f"architecture  {s['architecture']}",
        f"name          {s['name']}",
        f"size          {human_size(s['size_bytes'])} in {len(s['shards'])} file(s), {s['tensors']} tensors",
        f"parameters    {human_count(s['parameters'])}",
        f"quantization  {s['quantization']} (tensors: "
        + ", ".join(f"{k}: {v}" for k, v in s["quant_types"].items())
        + ")",
        f"context       {s['context_length']}",
        f"blocks        {s['block_count']}",
        f"MTP           {mtp_line}",
        f"tokenizer     {tok['model']}/{tok['pre']}, {tok['vocab_size']} tokens, {tok['merges']} merges, "
        f"BOS on prompts: {_yes_no(tok['add_bos'])}",
        f"chat template {tok['chat_format']}",
    ]
    if len(s["shards"]) > 1:
        lines += [f"shard         {p}" for p in s["shards"]]
    return "\n".join(lines)
