"""What a load made of a model, as every other layer reads it.

:class:`ModelInfo` is built once by the loader (:func:`engine.runtime.load.loader.load`), frozen,
and published by the engine (:meth:`engine.runtime.engine.Engine.models`) to any thread: the app's
pages, the endpoint's routes, the CLI. A model in a worker process sends its own whole (it
pickles). Readers use attributes, never string keys, so a renamed field is an error at once
rather than a silent ``None``; :meth:`ModelInfo.to_json` is the one place it becomes a dict
(``generate --json``, ``/v1/models``).

Three of its fields are reports whose shape belongs to the module that writes them, kept as the
JSON those modules write: ``placement`` (:mod:`engine.runtime.load.placement`), ``fit``
(:class:`engine.runtime.load.fit.Fit`) and ``memory`` (:class:`engine.gguf.memory.MemoryEstimate`).
The figures other layers need from them are properties here (:attr:`ModelInfo.memory_bytes`,
:attr:`ModelInfo.max_ctx_fits`, …), so only this module knows their keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

#: what a model answers (engine.runtime.pooled): text generation, embeddings, or reranking
CHAT, EMBEDDING, RERANK = "chat", "embedding", "rerank"


@dataclass(frozen=True)
class ModelInfo:
    """A loaded model: its files and shape, its MTP, its template, and the choices its load
    took. Immutable; safe to read from any thread."""

    name: str
    path: str
    #: chat | embedding | rerank: what requests it answers
    kind: str = CHAT
    #: the external MTP head's file (None: integrated, or MTP off)
    head: str | None = None
    architecture: str = ""
    description: str = ""
    n_ctx: int = 0
    #: the pooling of an embedding or rerank model (engine.runtime.pooled.POOLING); None for chat
    pooling: str | None = None
    #: sequences decoded together (1: one at a time), and what the load asked for
    parallel: int = 1
    parallel_requested: int = 1
    n_ctx_train: int = 0
    n_vocab: int = 0
    n_embd: int = 0
    nextn_layers: int = 0
    #: the MTP source the load resolved: off | integrated | external
    mtp: str = "off"
    #: how the head drafts (engine.gguf.families): single | chain | shared; None with MTP off
    drafting: str | None = None
    #: the deepest draft the drafting mode allows (chained heads: the head count); None: no cap
    depth_limit: int | None = None
    max_draft_depth: int = 4
    quantization: str | None = None
    add_bos: bool = False
    #: which chat template, and where it came from, in words
    chat_template: str = ""
    #: the template thinks in <think> blocks, and takes enable_thinking (a Think toggle)
    thinks: bool = False
    think_toggle: bool = False
    #: the tool-call family its template writes (engine.runtime.prompt.calls)
    tool_format: str = ""
    #: llama.cpp's CPU weight repacking, as this load used it
    extra_bufts: bool = False
    #: this machine's repacking verdict (engine.runtime.llama.repack): a sentence while it is off
    repack_notice: str | None = None
    #: fallbacks the load probe had to take, as sentences for the user
    fallbacks: tuple[str, ...] = ()
    #: why auto left MTP off although the file has NextN layers (None: it did not)
    mtp_off_reason: str | None = None
    #: the probe found the fallbacks on this load (False: remembered from an earlier one)
    fallbacks_found_now: bool = False
    exact: bool = False
    #: the projector file loaded beside the model (None: it takes text only), and what it
    #: takes: "vision", "audio"
    projector: str | None = None
    modalities: tuple[str, ...] = ()
    #: what the identity guarantee is for this load (docs/mtp.md: "Speculation and identity")
    identity: str = ""
    #: the RPC servers the model is spread over
    rpc: tuple[str, ...] = ()
    #: the layers' placement over the RPC devices (placement's JSON); None without RPC
    placement: dict[str, Any] | None = None
    #: the context asked for (``n_ctx`` is what the memory check made of it)
    n_ctx_requested: int = 0
    #: the memory check's report (Fit's JSON); None where it was off or did not apply
    fit: dict[str, Any] | None = None
    #: the memory estimate (MemoryEstimate's JSON); None without the memory check
    memory: dict[str, Any] | None = None

    # ----------------------------------------------------------------- figures
    @property
    def chat(self) -> bool:
        return self.kind == CHAT

    @property
    def memory_bytes(self) -> int:
        """What the model takes in memory by the load's estimate (0: not estimated)."""
        return int((self.memory or {}).get("total_bytes") or 0)

    @property
    def offloaded_bytes(self) -> int:
        """What of it sits on a GPU (0: none, or not estimated)."""
        return int((self.memory or {}).get("offloaded_bytes") or 0)

    @property
    def max_ctx_fits(self) -> int | None:
        """The largest context the memory check found fits (None: not checked)."""
        return None if self.fit is None else self.fit.get("max_ctx")

    @property
    def fit_label(self) -> str | None:
        """The memory check's verdict in a few words (None: not checked)."""
        return None if self.fit is None else self.fit.get("label")

    @property
    def context_lowered(self) -> bool:
        """Whether the memory check lowered the context below the setting (capped at the
        model's training context, which is not a lowering)."""
        if not self.fit:
            return False
        asked = self.n_ctx_requested
        return self.n_ctx < (min(asked, self.n_ctx_train) if self.n_ctx_train > 0 else asked)

    @property
    def capabilities(self) -> list[str]:
        """Ollama's capability words: completion, tools, thinking; embedding for a model that
        pools (rerankers too: Ollama's API has no other word)."""
        if not self.chat:
            return ["embedding"]
        return [
            "completion",
            *(["tools"] if self.tool_format else []),
            *(["thinking"] if self.thinks else []),
            *(["vision"] if "vision" in self.modalities else []),
            *(["audio"] if "audio" in self.modalities else []),
        ]

    # ------------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["fallbacks"], d["rpc"] = list(self.fallbacks), list(self.rpc)
        d["modalities"] = list(self.modalities)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ModelInfo:
        """The inverse of :meth:`to_json`; keys it does not know are ignored (an older writer's)."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key in ("fallbacks", "rpc", "modalities"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)


__all__ = ["ModelInfo", "CHAT", "EMBEDDING", "RERANK"]
