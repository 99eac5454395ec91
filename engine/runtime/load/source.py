"""Which MTP source a load uses, and why a file's own NextN layers cannot draft, in words.

:class:`MtpSource` is what a load asks for; :func:`resolve_source` decides it from the
file's facts and the family table (:mod:`engine.gguf.families`): auto never picks what
cannot draft, and an explicit choice that cannot is refused before llama.cpp could abort
on it. Also here: a file's pooling type (an embedding or reranking model, which drafts
nothing) and the true cause of a failed load of NextN layers llama.cpp has no graph for.
"""

from __future__ import annotations

import enum

from engine.errors import MtpUnavailableError
from engine.gguf.families import family, no_mtp_reason
from engine.gguf.shards import ModelSet
from engine.gguf.validate import MtpFacts, nextn_missing_problem


class MtpSource(str, enum.Enum):
    """Where MTP drafts come from."""

    OFF = "off"
    INTEGRATED = "integrated"  # NextN layers inside the target GGUF
    EXTERNAL = "external"  # a separate head GGUF (mtp-*.gguf)
    AUTO = "auto"  # integrated when the target has NextN layers, else external with a head, else off

    def __str__(self) -> str:
        return self.value


def nextn_load_failure(facts: MtpFacts) -> str | None:
    """The true cause when llama.cpp fails to load a file whose NextN (MTP) layers are of
    a family it builds no MTP graph for: it fails on those layers' tensors, not because the
    file is damaged. None for any other file."""
    fam = family(facts.architecture)
    if facts.kind != "integrated" or fam is None or fam.graph:
        return None
    return (
        f"llama.cpp could not load this {fam.label or facts.architecture} file: it holds {facts.nextn_layers} NextN "
        f"(MTP) layer(s), and {fam.no_graph}, so this build cannot load their tensors. The file is not damaged: "
        "use a conversion without the MTP layers, or a newer backend build when llama.cpp adds them."
    )


def pooling_of_file(ms: ModelSet) -> int | None:
    """The pooling type a GGUF sets (llama.h: 1 mean, 2 cls, 3 last, 4 rank), None when it
    sets none: a model that generates text."""
    first = ms.first
    value = first.get(f"{first.architecture}.pooling_type")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 4 else None


def mtp_problem(facts: MtpFacts) -> str | None:
    """Why llama.cpp cannot draft with this file's own MTP layers, in words; None when it can."""
    fam = family(facts.architecture)
    if fam is None or not fam.graph:
        return no_mtp_reason(facts.architecture)
    if facts.nextn_missing:
        return nextn_missing_problem(facts)
    return fam.nextn_problem(facts.nextn_layers)


def resolve_source(requested: MtpSource, facts: MtpFacts, has_head: bool) -> MtpSource:
    """The MTP source a load uses (off | integrated | external), by the family table
    (:mod:`engine.gguf.families`). Auto never picks what cannot draft; an explicit
    choice that cannot is refused with words, before llama.cpp could abort on it."""
    if facts.kind in ("head-only", "assistant"):
        raise MtpUnavailableError(
            "This file is an MTP head only (no trunk layers). Load the target model and pass this file as its head."
            if facts.kind == "head-only"
            else "This file is an assistant: a drafter for another model. Load its target model and pass this file as "
            "its MTP head (--head)."
        )
    own = facts.kind == "integrated"
    if requested == MtpSource.AUTO:
        if own and mtp_problem(facts) is None:
            requested = MtpSource.INTEGRATED
        elif has_head:
            requested = MtpSource.EXTERNAL
        else:
            return MtpSource.OFF
    if requested == MtpSource.INTEGRATED:
        if facts.kind == "trunk-only":
            raise MtpUnavailableError(
                f"This model declares {facts.nextn_layers} NextN (MTP) layer(s) but holds none: its MTP head "
                f"ships as a "
                "separate mtp-*.gguf file. Pass it with --mtp external --head FILE (or compose it into the model)."
            )
        if not own:
            raise MtpUnavailableError(
                "This model has no NextN (MTP) layers, so integrated MTP is not possible. "
                "Use --mtp external with a matching head file, or --mtp off."
            )
        if (problem := mtp_problem(facts)) is not None:
            raise MtpUnavailableError(problem)
    if requested == MtpSource.EXTERNAL and not has_head:
        raise MtpUnavailableError("External MTP needs a head file (--head mtp-*.gguf).")
    return requested
