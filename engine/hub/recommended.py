"""Repositories worth offering someone whose library is empty: a short curated list of
GGUF repos with integrated MTP (NextN) layers (``../shared/design/FIT.md``, section 4).

Only repository ids are kept here, never file lists: which quantizations a repo holds
is read from the Hub when the list is shown, and which of them fits this machine is
judged from their headers (:mod:`engine.runtime.load.recommend`).
"""

from __future__ import annotations

from engine.hub.files import FileGroup

#: smallest model first; each has integrated MTP layers (seen in llama.cpp PR #22673,
#: lmstudio-bug-tracker#1934 and the repos' own cards)
RECOMMENDED: tuple[str, ...] = (
    "unsloth/Qwen3.5-4B-MTP-GGUF",
    "unsloth/Qwen3.6-35B-A3B-MTP-GGUF",
    "unsloth/Qwen3.6-27B-MTP-GGUF",
    "ggml-org/Qwen3.6-27B-MTP-GGUF",
)


def candidate_groups(groups: list[FileGroup]) -> list[FileGroup]:
    """The file groups of a repo that could be a recommended download, largest first:
    complete models, not MTP heads nor projectors (``mmproj`` in the name; the header is
    checked afterwards)."""
    out = [g for g in groups if g.complete and not g.head and not g.projector]
    return sorted(out, key=lambda g: -g.size)
