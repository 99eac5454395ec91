"""What the endpoint can serve by name: every model in the library, and files named on
the command line, each known by every name a client may use for it.

A :class:`Servable` is one model the endpoint may load: its files, what it is for (chat,
embeddings, reranking: from its GGUF's pooling type), and its names. The names a request
may use, in the order they are tried:

- the canonical name: the library entry's id (unique), or a named file's stem;
- the library entry's display name (when no other entry shares it);
- the Hub repository it came from, ``OWNER/REPO`` or just ``REPO`` (when unique);
- its file's stem (``Qwen3-4B-Q4_K_M`` for ``Qwen3-4B-Q4_K_M.gguf``);
- Ollama's form for Hub models, ``hf.co/OWNER/REPO:QUANT`` (``:QUANT`` may be left
  out when the repository has one entry here; any case);
- any of these with Ollama's ``:latest`` tag.

A name two models share is refused in words that list them (never a silent pick:
STYLE.md). Any thread: the catalog re-reads the library when its index changes, and reads
a file's header once per file identity.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidRequestError, LibraryError, MtpStudioError
from engine.gguf.reader import read_header
from engine.runtime.modelinfo import CHAT, EMBEDDING, RERANK

#: llama.cpp's pooling types (include/llama.h): what a model that pools is for
POOLING_NAMES = {1: "mean", 2: "cls", 3: "last", 4: "rank"}


class AmbiguousModelError(InvalidRequestError):
    code = "model_ambiguous"


@dataclass(frozen=True)
class Servable:
    """One model the endpoint may load."""

    name: str  # canonical: what it is listed and loaded as
    path: Path
    head: Path | None = None  # a paired external MTP head
    projector: Path | None = None  # a paired projector (mmproj-*.gguf): the model sees images
    #: chat | embedding | rerank (by the file's pooling type)
    kind: str = CHAT
    size: int = 0  # bytes on disk, the head's included
    architecture: str = ""
    quantization: str = ""
    context_length: int | None = None
    #: library MTP status (integrated, external head, composite, none)
    mtp: str = "none"
    #: what its chat template shows it does: tools, thinking
    template_caps: tuple[str, ...] = ()
    #: other names requests may use (lower-cased for matching)
    aliases: tuple[str, ...] = ()
    #: from the command line rather than the library
    named: bool = False

    @property
    def capabilities(self) -> list[str]:
        """Ollama's capability words: completion, tools, thinking, embedding (rerankers:
        embedding too, as Ollama's API has no other word)."""
        if self.kind != CHAT:
            return ["embedding"]
        return ["completion", *self.template_caps, *(["vision"] if self.projector is not None else [])]


@dataclass
class _HeaderFacts:
    kind: str
    architecture: str
    context_length: int | None
    template_caps: tuple[str, ...]


def header_facts(path: Path) -> _HeaderFacts:
    """What a file's header says it is for, without loading it."""
    h = read_header(path)
    arch = h.architecture or ""
    pooling = h.get(f"{arch}.pooling_type")
    kind = CHAT
    if isinstance(pooling, int) and pooling in POOLING_NAMES:
        kind = RERANK if pooling == 4 else EMBEDDING
    ctx = h.get(f"{arch}.context_length")
    template = h.get("tokenizer.chat_template")
    caps: list[str] = []
    if isinstance(template, str):
        if "tools" in template or "tool_call" in template:
            caps.append("tools")
        if "<think>" in template or "enable_thinking" in template or "reasoning_content" in template:
            caps.append("thinking")
    return _HeaderFacts(kind, arch, ctx if isinstance(ctx, int) else None, tuple(caps))


def _norm(name: str) -> str:
    n = name.strip().lower()
    return n.removesuffix(":latest")


class Catalog:
    """The servable models: the library's (``library`` may be None: named files only) and
    ``paths`` named on the command line (loaded at start by ``serve``)."""

    def __init__(self, library=None, paths: tuple[Path, ...] = ()):
        self.library = library
        self.paths = tuple(Path(p) for p in paths)
        self._lock = threading.Lock()
        self._facts: dict[tuple, _HeaderFacts] = {}
        self._stamp: object = None
        self._items: list[Servable] = []

    # ------------------------------------------------------------------ reading
    def items(self) -> list[Servable]:
        """Every servable model (named files first), re-read when the library changed."""
        stamp = self._library_stamp()
        with self._lock:
            if stamp != self._stamp or not self._items and (self.paths or self.library is not None):
                self._items = self._build()
                self._stamp = stamp
            return list(self._items)

    def _library_stamp(self) -> object:
        if self.library is None:
            return None
        try:
            st = (self.library.root / "library.json").stat()
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return "missing"

    def _facts_of(self, path: Path) -> _HeaderFacts | None:
        try:
            st = path.stat()
        except OSError:
            return None
        key = (str(path), st.st_mtime_ns, st.st_size)
        facts = self._facts.get(key)
        if facts is None:
            try:
                facts = header_facts(path)
            except MtpStudioError:
                return None  # a damaged file is not offered (the library shows why)
            self._facts[key] = facts
        return facts

    def _build(self) -> list[Servable]:
        out: list[Servable] = []
        for p in self.paths:
            stem = p.name.removesuffix(".gguf")
            # a named file whose header cannot be read is still listed: loading it says why
            facts = self._facts_of(p) or _HeaderFacts(CHAT, "", None, ())
            out.append(
                Servable(
                    stem,
                    p,
                    kind=facts.kind,
                    size=_size(p),
                    architecture=facts.architecture,
                    context_length=facts.context_length,
                    template_caps=facts.template_caps,
                    aliases=(_norm(stem),),
                    named=True,
                )
            )
        if self.library is None:
            return out
        try:
            entries = self.library.entries()
        except (OSError, LibraryError):
            return out
        by_id = {e.id: e for e in entries}
        for e in entries:
            if e.kind in ("head", "projector"):
                continue  # an MTP head or a projector is served with its model, never alone
            path = e.path(self.library.root)
            if any(s.path == path for s in out):
                continue
            facts = self._facts_of(path)
            if facts is None:
                continue
            head_entry = by_id.get(e.pair) if e.pair else None
            head = head_entry.path(self.library.root) if head_entry is not None and head_entry.kind == "head" else None
            try:
                projector = self.library.projector_path(e)
            except (OSError, LibraryError):  # its projector is gone: served for text
                projector = None
            out.append(
                Servable(
                    e.id,
                    path,
                    head=head,
                    projector=projector,
                    kind=facts.kind,
                    size=e.size + (head_entry.size if head is not None and head_entry is not None else 0),
                    architecture=facts.architecture or e.facts.architecture,
                    quantization=e.facts.quantization,
                    context_length=facts.context_length,
                    mtp=str(e.mtp) if head is None else "external head",
                    template_caps=facts.template_caps,
                    aliases=tuple(_aliases(e)),
                )
            )
        return out

    # ------------------------------------------------------------------ lookup
    def find(self, name: str) -> Servable | None:
        """The model ``name`` means: None when none; :class:`AmbiguousModelError` when
        several share it."""
        want = _norm(name)
        items = self.items()
        for s in items:  # a canonical name is unique: it wins over any alias
            if _norm(s.name) == want:
                return s
        hits = [s for s in items if want in s.aliases]
        if len(hits) > 1:
            raise AmbiguousModelError(
                f"{len(hits)} models answer to {name!r}: " + ", ".join(s.name for s in hits) + ". Name one of them."
            )
        return hits[0] if hits else None

    def get(self, name: str) -> Servable:
        s = self.find(name)
        if s is None:
            raise LibraryError(f"No model {name!r} in the library (see GET /v1/models or `mtp-studio models`).")
        return s


def _aliases(e) -> list[str]:
    names = {e.name, e.files[0].removesuffix(".gguf")}
    first = e.files[0].removesuffix(".gguf")
    if "-00001-of-" in first:
        names.add(first.split("-00001-of-")[0])
    repo = e.origin.repo if e.origin.source == "hub" else None
    if isinstance(repo, str) and repo:
        names |= {repo, repo.rsplit("/", 1)[-1], f"hf.co/{repo}", f"huggingface.co/{repo}"}
        quant = e.facts.quantization
        if isinstance(quant, str) and quant:
            names |= {f"hf.co/{repo}:{quant}", f"huggingface.co/{repo}:{quant}", f"{repo}:{quant}"}
    return sorted({_norm(n) for n in names if isinstance(n, str) and n})


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


__all__ = ["Catalog", "Servable", "AmbiguousModelError", "CHAT", "EMBEDDING", "RERANK", "header_facts"]
