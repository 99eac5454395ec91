"""The model library: models on disk with provenance, MTP status and pairs (a model with
its MTP head; a model with its multimodal projector).

Each entry is a folder under the library root holding its GGUF file(s) and an
``entry.json`` (written atomically) that says where the files came from. The index
``library.json`` is a cache of those records: when it is lost or damaged it is rebuilt
from the folders (reading the headers of any GGUF without a record). Nothing outside
the library root is ever modified or deleted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from engine.errors import DiskSpaceError, GGUFError, LibraryError, MtpStudioError
from engine.fileio import write_json_atomic
from engine.gguf.filecopy import Copier, check_space, commit, discard, temp_path
from engine.gguf.inspect import summarize
from engine.gguf.shards import open_set
from engine.gguf.validate import validate_set
from engine.hub.projectors import check_projector_pair, is_projector_file, projector_summary
from engine.paths import models_dir

INDEX_VERSION = 1


class EntryKind(StrEnum):
    """What a library entry is."""

    MODEL = "model"  # a target, with or without NextN layers
    HEAD = "head"  # an MTP head only (no trunk)
    COMPOSITE = "composite"  # a target + head composed here
    PROJECTOR = "projector"  # a multimodal projector (mmproj): read with a model, never loaded alone


class MtpStatus(StrEnum):
    """Where an entry's MTP drafts come from (shown in the library's MTP column)."""

    NONE = "none"
    INTEGRATED = "integrated"
    EXTERNAL_HEAD = "external head"
    COMPOSITE = "composite"


#: validate's MtpFacts.kind -> the entry's MTP status
MTP_LABELS = {
    "none": MtpStatus.NONE,
    "integrated": MtpStatus.INTEGRATED,
    "head-only": MtpStatus.EXTERNAL_HEAD,
    "assistant": MtpStatus.EXTERNAL_HEAD,  # a drafter for another model (Gemma 4's assistants)
    "trunk-only": MtpStatus.NONE,  # its NextN layers ship in a separate mtp- file
}


@dataclass(frozen=True)
class EntryFacts:
    """What an entry's files' headers say (read when the entry was made, kept in its
    ``entry.json``): a typed view of :attr:`Entry.summary` for every reader outside the
    library."""

    architecture: str = ""
    quantization: str = ""
    parameters: int = 0
    context_length: int | None = None
    block_count: int | None = None
    nextn_layers: int | None = None
    #: a projector's: what it reads (vision, audio) and how wide its output is (the
    #: embedding width of the models it fits)
    modalities: tuple[str, ...] = ()
    output_width: int | None = None

    @classmethod
    def of(cls, s: dict) -> EntryFacts:
        return cls(
            architecture=s.get("architecture") or "",
            quantization=s.get("quantization") or s.get("main_quant_type") or "",
            parameters=s.get("parameters") or 0,
            context_length=s.get("context_length"),
            block_count=s.get("block_count"),
            nextn_layers=s.get("nextn_layers"),
            modalities=tuple(m for m in s.get("modalities") or () if isinstance(m, str)),
            output_width=s.get("output_width"),
        )


@dataclass(frozen=True)
class Origin:
    """Where an entry came from: a typed view of :attr:`Entry.provenance`."""

    #: hub | import | compose | found
    source: str = ""
    #: the Hugging Face repository and revision (source "hub")
    repo: str | None = None
    revision: str | None = None
    #: the file it was imported from (source "import")
    path: str | None = None

    @classmethod
    def of(cls, p: dict) -> Origin:
        return cls(p.get("source") or "", p.get("repo"), p.get("revision"), p.get("path"))

    @property
    def label(self) -> str:
        """In a few words: the repository, else the imported file's name, else the source."""
        return self.repo or (Path(self.path).name if self.path else "") or self.source


@dataclass
class Entry:
    id: str
    name: str
    files: list[str]  # names inside the entry folder; files[0] is what llama.cpp opens
    kind: EntryKind
    mtp: MtpStatus
    size: int
    provenance: dict
    summary: dict = field(default_factory=dict)
    pair: str | None = None  # the paired head (for a model) or model (for a head)
    added: float = 0.0
    #: (a model) the id of its projector's entry: the model reads images (or audio) with it.
    #: A projector may serve several models (quantizations of one model), so it names none.
    projector: str | None = None

    @property
    def facts(self) -> EntryFacts:
        return EntryFacts.of(self.summary or {})

    @property
    def origin(self) -> Origin:
        return Origin.of(self.provenance or {})

    def folder(self, root: Path) -> Path:
        return root / self.id

    def path(self, root: Path) -> Path:
        return root / self.id / self.files[0]


def _entry_from(d: object, folder_name: str | None = None) -> Entry:
    """An :class:`Entry` from JSON, checked field by field (``ValueError`` if not one)."""
    if not isinstance(d, dict):
        raise ValueError("not an object")
    known = {f.name for f in fields(Entry)}
    kw = {k: v for k, v in d.items() if k in known}
    e = Entry(**kw)  # TypeError when a required field is missing
    e.kind, e.mtp = EntryKind(e.kind), MtpStatus(e.mtp)  # ValueError when not one of them
    checks = (
        isinstance(e.id, str)
        and bool(e.id)
        and "/" not in e.id
        and e.id not in (".", "..")
        and (folder_name is None or e.id == folder_name),
        isinstance(e.name, str),
        isinstance(e.files, list)
        and bool(e.files)
        and all(isinstance(f, str) and f and "/" not in f and "\\" not in f and f not in (".", "..") for f in e.files),
        isinstance(e.size, int) and not isinstance(e.size, bool) and e.size >= 0,
        isinstance(e.provenance, dict),
        isinstance(e.summary, dict),
        e.pair is None or isinstance(e.pair, str),
        e.projector is None or isinstance(e.projector, str),
        isinstance(e.added, (int, float)) and not isinstance(e.added, bool),
    )
    if not all(checks):
        raise ValueError("a field has the wrong type or value")
    return e


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return s[:80] or "model"


def describe(first_file: Path) -> tuple[str, str, dict]:
    """(kind, mtp label, summary) from the headers."""
    if is_projector_file(first_file):
        return EntryKind.PROJECTOR, MtpStatus.NONE, projector_summary(first_file)
    ms = open_set(first_file)
    report, facts = validate_set(ms)
    if not report.valid:
        raise GGUFError(str(report.errors[0]), file=str(first_file), code=report.errors[0].code)
    s = summarize(ms, facts)
    keep = (
        "architecture",
        "name",
        "parameters",
        "quantization",
        "main_quant_type",
        "context_length",
        "embedding_length",
        "block_count",
        "nextn_layers",
        "size_bytes",
    )
    summary = {k: s[k] for k in keep}
    summary["vocab_size"] = s["tokenizer"]["vocab_size"]
    kind = EntryKind.HEAD if facts.kind in ("head-only", "assistant") else EntryKind.MODEL
    return kind, MTP_LABELS[facts.kind], summary


class Library:
    """Thread-safe for writers within one process (one lock around the index)."""

    def __init__(self, root: Path | None = None, *, limit_bytes: int | None = None):
        if root is None:
            root = models_dir()
        self.root = root
        self.limit_bytes = limit_bytes
        self._lock = threading.RLock()

    @property
    def partial_dir(self) -> Path:
        return self.root / ".downloads"

    @property
    def _index(self) -> Path:
        return self.root / "library.json"

    # ----------------------------------------------------------------- reading
    def entries(self) -> list[Entry]:
        with self._lock:
            try:
                raw = json.loads(self._index.read_text())
                entries = [_entry_from(e) for e in raw["entries"]]
                if all(self._entry_dir_ok(self.root / e.id) for e in entries):
                    return entries
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                pass  # a damaged or foreign index is rebuilt from the entry folders
            return self.rebuild()

    def _entry_dir_ok(self, folder: Path) -> bool:
        """An entry folder is a real folder inside the library (never a link out of it)."""
        return folder.is_dir() and not folder.is_symlink() and folder.resolve().parent == self.root.resolve()

    def rebuild(self) -> list[Entry]:
        """Rebuild the index from the entry folders (their records, else their headers)."""
        with self._lock:
            entries = []
            if self.root.is_dir():
                for folder in sorted(
                    p for p in self.root.iterdir() if self._entry_dir_ok(p) and not p.name.startswith(".")
                ):
                    e = self._read_entry(folder)
                    if e is not None:
                        entries.append(e)
            self._save(entries)
            return entries

    def _read_entry(self, folder: Path) -> Entry | None:
        record = folder / "entry.json"
        if record.is_symlink():
            return None  # never read or write through a link
        recovered: dict = {}
        damaged = False
        if record.exists():
            try:
                raw = json.loads(record.read_text())
            except (OSError, ValueError, RecursionError):
                raw = None
            try:
                return _entry_from(raw, folder.name)
            except (ValueError, TypeError):
                pass
            # a damaged record: keep it aside and recover what can be recovered from it
            damaged = True
            if isinstance(raw, dict):
                for key in ("provenance", "pair", "added", "name", "projector"):
                    if key in raw:
                        recovered[key] = raw[key]
            try:
                record.replace(folder / "entry.json.bad")
            except OSError:
                pass
        ggufs = sorted(p.name for p in folder.glob("*.gguf") if not p.is_symlink())
        if not ggufs:
            return None
        first = next((g for g in ggufs if "-00001-of-" in g), ggufs[0])
        try:
            kind, mtp, summary = describe(folder / first)
        except MtpStudioError:
            return None
        files = [first] + [g for g in ggufs if g != first and g.startswith(first.split("-00001-of-")[0])]
        size = sum((folder / f).stat().st_size for f in files)
        provenance = {"source": "found"}
        if isinstance(recovered.get("provenance"), dict):
            provenance = dict(recovered["provenance"], recovered_from="entry.json.bad")
        elif damaged:
            provenance["recovered_from"] = "entry.json.bad"
        name = recovered.get("name") if isinstance(recovered.get("name"), str) else None
        pair = recovered.get("pair") if isinstance(recovered.get("pair"), str) else None
        projector = recovered.get("projector") if isinstance(recovered.get("projector"), str) else None
        added = recovered.get("added")
        if isinstance(added, bool) or not isinstance(added, (int, float)):
            added = folder.stat().st_mtime
        e = Entry(
            folder.name,
            name or summary.get("name") or folder.name,
            files,
            kind,
            mtp,
            size,
            provenance,
            summary,
            pair=pair,
            added=added,
            projector=projector,
        )
        write_json_atomic(folder / "entry.json", asdict(e), indent=2)
        return e

    def _save(self, entries: list[Entry]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self._index, {"version": INDEX_VERSION, "entries": [asdict(e) for e in entries]}, indent=2)

    def get(self, key: str) -> Entry:
        """An entry by id or by name (unique)."""
        entries = self.entries()
        for e in entries:
            if e.id == key:
                return e
        named = [e for e in entries if e.name == key]
        if len(named) == 1:
            return named[0]
        if named:
            raise LibraryError(f"{len(named)} models are named {key!r}; use an id: " + ", ".join(e.id for e in named))
        raise LibraryError(f"No model {key!r} in the library (see `mtp-studio models`).")

    def total_size(self) -> int:
        return sum(e.size for e in self.entries())

    def space_left(self) -> int | None:
        """Bytes the library may still use under its size limit (None: no limit)."""
        if self.limit_bytes is None:
            return None
        return max(0, self.limit_bytes - self.total_size())

    def find_provenance(self, repo_id: str, revision: str, files: list[str]) -> Entry | None:
        for e in self.entries():
            p = e.provenance
            if p.get("source") == "hub" and p.get("repo") == repo_id and p.get("revision") == revision:
                if [f["path"] for f in p.get("files", [])] == files:
                    return e
        return None

    # ----------------------------------------------------------------- writing
    def _new_id(self, base: str) -> str:
        base = _slug(base)
        taken = {p.name for p in self.root.iterdir()} if self.root.is_dir() else set()
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def add(self, files: list[Path], *, name: str, provenance: dict, names: list[str] | None = None) -> Entry:
        """Move verified files (same filesystem: atomic renames) into a new entry, as
        ``names`` (default: their own names)."""
        names = names or [f.name for f in files]
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            eid = self._new_id(name)
            staging = self.root / f".adding-{eid}-{os.getpid()}"
            staging.mkdir()
            try:
                for f, n in zip(files, names):
                    os.replace(f, staging / n)
                kind, mtp, summary = describe(staging / names[0])
                size = sum((staging / n).stat().st_size for n in names)
                e = Entry(eid, name, list(names), kind, mtp, size, provenance, summary, added=time.time())
                write_json_atomic(staging / "entry.json", asdict(e), indent=2)
                staging.rename(self.root / eid)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            entries = [x for x in self.entries() if x.id != eid] + [e]
            self._save(entries)
            return e

    def update(self, entry: Entry) -> None:
        with self._lock:
            write_json_atomic(self.root / entry.id / "entry.json", asdict(entry), indent=2)
            self._save([entry if x.id == entry.id else x for x in self.entries()])

    def import_file(
        self,
        path: Path,
        *,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Entry:
        """Copy a local GGUF (or shard set) into the library, after validating it."""
        ms = open_set(path)
        report, _ = validate_set(ms)
        if not report.valid:
            raise GGUFError(f"not imported: {report.errors[0]}", file=str(path), code=report.errors[0].code)
        size = ms.total_size
        check_space(self.root, size)  # a library not made yet is measured on its parent's disk
        if self.limit_bytes is not None and size > (self.space_left() or 0):
            raise DiskSpaceError(size, self.space_left() or 0, f"the library (limit {self.limit_bytes} bytes)")
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / ".importing"
        staging.mkdir(exist_ok=True)
        finals = [staging / p.name for p in ms.paths]
        temps = [temp_path(f) for f in finals]
        copier = Copier(size, progress, cancel)
        try:
            for src, tmp in zip(ms.paths, temps):
                fd_in = os.open(src, os.O_RDONLY)
                fd_out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    copier.copy(fd_in, 0, fd_out, os.fstat(fd_in).st_size)
                finally:
                    os.close(fd_in)
                    os.close(fd_out)
            commit(temps, finals)
            name = ms.paths[0].name.removesuffix(".gguf").split("-00001-of-")[0]
            return self.add(finals, name=name, provenance={"source": "import", "path": str(Path(path).resolve())})
        except BaseException:
            discard(temps + finals)
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def delete(self, key: str) -> Entry:
        """Remove an entry's folder (only ever inside the library root)."""
        with self._lock:
            e = self.get(key)
            folder = self.root / e.id
            root = self.root.resolve()
            if folder.is_symlink() or folder.resolve().parent != root:
                raise LibraryError(f"refusing to delete {folder}: it is not a folder of the library")
            shutil.rmtree(folder)
            remaining = []
            for x in self.entries():
                if x.id == e.id:
                    continue
                if e.id in (x.pair, x.projector):
                    x.pair = None if x.pair == e.id else x.pair
                    x.projector = None if x.projector == e.id else x.projector
                    write_json_atomic(self.root / x.id / "entry.json", asdict(x), indent=2)
                remaining.append(x)
            self._save(remaining)
            return e

    def pair(self, model_id: str, head_id: str) -> None:
        with self._lock:
            m, h = self.get(model_id), self.get(head_id)
            m.pair, h.pair = h.id, m.id
            self.update(m)
            self.update(h)

    def attach_projector(self, model_id: str, projector_id: str) -> Entry:
        """Record ``projector_id`` as the projector of ``model_id`` once their headers
        agree (the projector's output width is the model's input embedding width);
        raises :class:`ProjectorMismatchError`, in words, when they do not. Returns the
        model's entry."""
        with self._lock:
            m, p = self.get(model_id), self.get(projector_id)
            check_projector_pair(m, p, self.root)
            m.projector = p.id
            self.update(m)
            return m

    def projector_of(self, entry: Entry) -> Entry | None:
        """The projector entry ``entry`` (a model) reads images with; None: it has none."""
        if entry.projector is None:
            return None
        return next((e for e in self.entries() if e.id == entry.projector and e.kind == EntryKind.PROJECTOR), None)

    def projector_path(self, entry: Entry) -> Path | None:
        """The projector file ``entry`` (a model) reads images with; None: it has none."""
        p = self.projector_of(entry)
        return p.path(self.root) if p is not None else None
