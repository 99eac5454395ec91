"""The endpoint's model list: the loaded models and every model it may load on demand,
in one shape that ``/v1/models``, ``/api/tags`` and ``/api/ps`` each write in theirs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.runtime.ondemand.catalog import CHAT, EMBEDDING, RERANK, Servable
from engine.runtime.ondemand.residency import ResidentInfo


@dataclass
class Listed:
    name: str
    loaded: bool
    kind: str = CHAT  # chat | embedding | rerank
    size: int = 0  # bytes on disk
    context_length: int | None = None  # the loaded context, else the file's training context
    architecture: str = ""
    quantization: str = ""
    mtp: str = "none"  # the loaded MTP source, else the library's MTP status
    capabilities: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # the engine's info while loaded
    #: while loaded by way of the residency (engine.runtime.ondemand): memory, idle, expiry
    residency: ResidentInfo | None = None


def capabilities(info: dict) -> list[str]:
    """Ollama's capability words for a model's info (loaded, or its catalog facts with
    ``capabilities`` already known): completion, tools, thinking; embedding for a model
    that pools (rerankers too: Ollama's API has no other word)."""
    if "capabilities" in info:
        return list(info["capabilities"])
    if info.get("kind", CHAT) != CHAT:
        return ["embedding"]
    caps = ["completion"]
    if info.get("tool_format"):
        caps.append("tools")
    if info.get("thinks"):
        caps.append("thinking")
    return caps


def _file_size(info: dict) -> int:
    total = 0
    for key in ("path", "head"):
        try:
            total += os.path.getsize(info.get(key) or "")
        except OSError:
            pass
    return total


def listing(state) -> list[Listed]:
    """Loaded models first (as loaded), then the ones that would load on demand."""
    loaded = state.engine.models()
    residency = getattr(state, "residency", None)
    resident = {r.name: r for r in residency.loaded()} if residency is not None else {}
    out: list[Listed] = []
    paths = set()
    for name, info in loaded.items():
        paths.add(info.get("path"))
        out.append(
            Listed(
                name,
                True,
                info.get("kind", CHAT),
                _file_size(info),
                info.get("n_ctx"),
                info.get("architecture") or "",
                info.get("quantization") or "",
                info.get("mtp") or "off",
                capabilities(info),
                info,
                resident.get(name),
            )
        )
    if residency is not None:
        for s in residency.catalog.items():
            if s.name in loaded or str(s.path) in paths:
                continue
            out.append(_of_servable(s))
    return out


def _of_servable(s: Servable) -> Listed:
    return Listed(
        s.name, False, s.kind, s.size, s.context_length, s.architecture, s.quantization, s.mtp, s.capabilities
    )


__all__ = ["Listed", "listing", "capabilities", "CHAT", "EMBEDDING", "RERANK"]
