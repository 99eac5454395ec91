"""Does this MTP head fit this target? One rule, from headers alone, for every caller:
the loader (external MTP), compose, ``pull`` (on remote headers, before downloading) and
the GUI's compatibility line.

A head fits when it has NextN layers (no more than llama.cpp's graph for the
architecture runs), the architecture and hidden size are the target's, the vocabulary is
the same (its size always; its tokens byte for byte where both token lists are known),
and every tensor of its NextN block is one llama.cpp loads for that architecture — a
stray tensor (say ``blk.N.ffn_norm.weight``) would make llama.cpp refuse the composite,
so it is rejected here, by name. Compose adds its own structural checks on top (the
target must not have NextN layers, per-layer arrays and shared tensors must line up).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from engine.errors import PairingError
from engine.gguf.shards import ModelSet
from engine.gguf.families import ASSISTANTS, family, no_mtp_reason, tensor_base
from engine.gguf.validate import block_index

_DENSE_BLOCK = frozenset(
    {
        "attn_norm",
        "post_attention_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_qkv",
        "attn_output",
        "attn_q_norm",
        "attn_k_norm",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    }
)
_MOE_BLOCK = frozenset(
    {
        "ffn_gate_inp",
        "ffn_gate_exps",
        "ffn_up_exps",
        "ffn_gate_up_exps",
        "ffn_down_exps",
        "ffn_exp_probs_b",
        "ffn_gate_inp_shexp",
        "ffn_gate_shexp",
        "ffn_up_shexp",
        "ffn_down_shexp",
    }
)
_NEXTN = frozenset(
    {f"nextn.{n}" for n in ("eh_proj", "enorm", "hnorm", "embed_tokens", "shared_head_head", "shared_head_norm")}
)

#: tensors llama.cpp loads in the NextN block, per architecture (from its
#: ``load_arch_tensors``); architectures not listed are not checked tensor by tensor
NEXTN_BLOCK_TENSORS: dict[str, frozenset[str]] = {
    "qwen35": _DENSE_BLOCK | _NEXTN,
    "qwen35moe": _DENSE_BLOCK | _MOE_BLOCK | _NEXTN,
}


@dataclass(frozen=True)
class HeaderFacts:
    """What a GGUF's header says that matters before downloading or pairing it, read from its
    first bytes (:func:`engine.hub.remote.read_remote_header` over HTTP)."""

    architecture: str | None
    name: str | None = None
    context_length: int | None = None
    embedding_length: int | None = None
    block_count: int | None = None
    nextn_layers: int = 0
    embedding_length_out: int | None = None
    #: none | integrated | head-only | trunk-only | assistant (what the file holds of MTP)
    mtp: str = "none"
    vocab_size: int | None = None
    tensor_names: tuple[str, ...] | None = None
    #: bytes the header takes (what a ranged read fetched of it)
    header_bytes: int = 0

    def to_json(self) -> dict:
        d = asdict(self)
        d["tensor_names"] = list(self.tensor_names) if self.tensor_names is not None else None
        return d


@dataclass(frozen=True)
class Summary:
    """What pairing needs to know of one GGUF set (local, or a remote header)."""

    name: str
    architecture: str | None
    embedding_length: int | None
    vocab_size: int | None
    block_count: int | None
    nextn_layers: int
    #: SHA-256 of the token list; None where unknown (a remote header summary)
    vocab_digest: str | None = None
    #: every tensor name; None where unknown
    tensor_names: tuple[str, ...] | None = None
    #: an assistant's ``embedding_length_out`` (the hidden size of the target it drafts for)
    embedding_length_out: int | None = None

    @classmethod
    def of_set(cls, ms: ModelSet) -> Summary:
        h = ms.first
        arch = h.architecture
        tokens = h.kvs.get("tokenizer.ggml.tokens")

        def u(key: str) -> int | None:
            v = h.get(f"{arch}.{key}")
            return int(v) if isinstance(v, int) else None

        return cls(
            name=ms.paths[0].name,
            architecture=arch,
            embedding_length=u("embedding_length"),
            vocab_size=tokens.count if tokens is not None else None,
            block_count=u("block_count"),
            nextn_layers=u("nextn_predict_layers") or 0,
            vocab_digest=hashlib.sha256(tokens.raw_value).hexdigest() if tokens is not None else None,
            tensor_names=tuple(t.name for _, t in ms.all_tensors()),
            embedding_length_out=u("embedding_length_out"),
        )

    @classmethod
    def of_remote(cls, name: str, header: HeaderFacts) -> Summary:
        """From a header's facts (:func:`engine.hub.remote.read_remote_header`)."""
        return cls(
            name=name,
            architecture=header.architecture,
            embedding_length=header.embedding_length,
            vocab_size=header.vocab_size,
            block_count=header.block_count,
            nextn_layers=header.nextn_layers,
            tensor_names=header.tensor_names,
            embedding_length_out=header.embedding_length_out,
        )


@dataclass(frozen=True)
class Pairing:
    architecture: str
    nextn_layers: int
    #: trunk layers the head was made for (block_count - nextn), when known
    head_trunk_layers: int | None


def unknown_nextn_tensors(arch: str, head: Summary) -> list[str]:
    """Tensors of the head's NextN block(s) that llama.cpp never loads for ``arch``."""
    allowed = NEXTN_BLOCK_TENSORS.get(arch)
    if allowed is None or head.tensor_names is None or head.block_count is None:
        return []
    first_nextn = head.block_count - head.nextn_layers
    bad = []
    for name in head.tensor_names:
        b = block_index(name)
        if b is None or b < first_nextn:
            continue
        base = tensor_base(name.split(".", 2)[2]) if name.count(".") >= 2 else name
        if base not in allowed:
            bad.append(name)
    return bad


def check_pair(target: Summary, head: Summary) -> Pairing:
    """Raise :class:`PairingError` unless ``head`` is an MTP head ``target`` can use."""
    if head.nextn_layers == 0:
        raise PairingError(
            f"{head.name} has no NextN (MTP) layers, so it cannot be used as an MTP head.", code="head_without_nextn"
        )
    arch = target.architecture
    if arch is None:
        raise PairingError(f"{target.name} has no general.architecture.", code="missing_architecture")
    head_fam = family(head.architecture)
    if head_fam is not None and head_fam.target_arch is not None:
        return _check_assistant(target, head, head_fam.target_arch)
    if head.architecture != arch:
        hint = f" {arch} drafts with its assistant ({ASSISTANTS[arch]})." if arch in ASSISTANTS else ""
        raise PairingError(
            f"The head is for architecture {head.architecture!r} but the target is {arch!r}. "
            f"Pick the head published with this model.{hint}",
            code="architecture_mismatch",
        )
    fam = family(arch)
    if fam is None or not fam.graph:
        raise PairingError(no_mtp_reason(arch), code="unsupported_architecture")
    if (problem := fam.nextn_problem(head.nextn_layers)) is not None:
        raise PairingError(problem, code="too_many_nextn")
    if target.embedding_length != head.embedding_length:
        raise PairingError(
            f"Hidden size differs: the target has {target.embedding_length}, the head {head.embedding_length}. "
            "This head is for another model.",
            code="hidden_size_mismatch",
        )
    _check_vocab(target, head)
    bad = unknown_nextn_tensors(arch, head)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise PairingError(
            f"The head holds {bad[0]}{more}, a tensor llama.cpp's {arch} never loads in an MTP block, "
            "so the composite would fail to load. This file is not a head llama.cpp can use.",
            code="unknown_tensor",
        )
    head_trunk = head.block_count - head.nextn_layers if head.block_count is not None else None
    return Pairing(arch, head.nextn_layers, head_trunk)


def _check_vocab(target: Summary, head: Summary) -> None:
    if target.vocab_size != head.vocab_size:
        raise PairingError(
            f"The head's vocabulary differs from the target's ({target.vocab_size} vs {head.vocab_size} tokens). "
            "This head is for another model.",
            code="vocab_mismatch",
        )
    if target.vocab_digest and head.vocab_digest and target.vocab_digest != head.vocab_digest:
        raise PairingError(
            "The head's vocabulary differs from the target's (same size, different tokens). This head is for "
            "another model.",
            code="tokenizer_mismatch",
        )


def _check_assistant(target: Summary, head: Summary, target_arch: str) -> Pairing:
    """An assistant (Gemma 4's drafter) pairs with a target of its target architecture
    whose hidden size is the assistant's ``embedding_length_out``, with the same vocabulary."""
    if target.architecture != target_arch:
        raise PairingError(
            f"{head.name} is a {head.architecture} drafter, made for {target_arch} models; the target is "
            f"{target.architecture!r}. Pick the assistant published with this model.",
            code="architecture_mismatch",
        )
    if head.embedding_length_out != target.embedding_length:
        raise PairingError(
            f"The assistant was made for a model with hidden size {head.embedding_length_out}; the target's is "
            f"{target.embedding_length}. Pick the assistant published with this model size.",
            code="hidden_size_mismatch",
        )
    _check_vocab(target, head)
    return Pairing(head.architecture or "", head.nextn_layers, None)
