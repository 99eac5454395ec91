"""The endpoint's model list: the loaded models and every model it may load on demand,
in one shape that ``/v1/models``, ``/api/tags`` and ``/api/ps`` each write in theirs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.runtime.ondemand.catalog import CHAT, EMBEDDING, RERANK, Servable
from engine.runtime.modelinfo import ModelInfo
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
    info: ModelInfo | None = None  # what its load made of it, while loaded
    #: while loaded by way of the residency (engine.runtime.ondemand): memory, idle, expiry
    residency: ResidentInfo | None = None

    @property
    def chat_template(self) -> str:
        """The loaded model's chat template in words ("" while not loaded: not read yet)."""
        return self.info.chat_template if self.info is not None else ""

    @property
    def n_embd(self) -> int | None:
        return self.info.n_embd if self.info is not None else None


def _file_size(info: ModelInfo) -> int:
    total = 0
    for path in (info.path, info.head):
        try:
            total += os.path.getsize(path or "")
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
        paths.add(info.path)
        out.append(
            Listed(
                name,
                True,
                info.kind,
                _file_size(info),
                info.n_ctx,
                info.architecture,
                info.quantization or "",
                info.mtp,
                info.capabilities,
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


__all__ = ["Listed", "listing", "CHAT", "EMBEDDING", "RERANK"]
