"""Compose a target and its MTP head into the library, and check a pair before that:
the work behind the GUI's Compose page (run off the GUI thread) and reusable elsewhere."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import MtpStudioError
from engine.gguf.compose import ComposeResult, check_compatible, compose
from engine.gguf.constants import shard_name
from engine.gguf.shards import open_set, parse_shard_name
from engine.gguf.validate import validate_set
from engine.hub.library import Entry, EntryKind, Library, MtpStatus

WORK_DIR = ".composing"


@dataclass(frozen=True)
class PairCheck:
    """A compatible pair, from the headers alone."""

    architecture: str
    trunk_layers: int
    nextn_layers: int
    warnings: tuple[str, ...]


def check_files(target: Path, head: Path) -> PairCheck:
    """Both files valid GGUF sets, and the head fits the target (the pairing rule plus
    compose's structural checks); raises an :class:`MtpStudioError` that says why not."""
    tset, hset = open_set(target), open_set(head)
    for ms, what in ((tset, "target"), (hset, "head")):
        report, _ = validate_set(ms)
        if not report.valid:
            raise MtpStudioError(f"the {what} is not a valid GGUF: {report.errors[0]}")
    arch, n, _head_trunk, k, warnings = check_compatible(tset, hset)
    return PairCheck(arch, n, k, tuple(warnings))


def composite_name(target: Path) -> tuple[str, str]:
    """(entry name, first output file name) for the composite of ``target``: ``X.gguf``
    becomes ``X-mtp.gguf``; a split set ``X-00001-of-0000N.gguf`` becomes
    ``X-mtp-00001-of-0000N.gguf``."""
    shard = parse_shard_name(target)
    if shard is not None:
        name = f"{shard.prefix}-mtp"
        return name, shard_name(name, 1, shard.count)
    name = f"{target.name.removesuffix('.gguf')}-mtp"
    return name, f"{name}.gguf"


def compose_into_library(
    library: Library,
    target: Path,
    head: Path,
    *,
    progress: Callable[[float], None] | None = None,
    cancel: threading.Event | None = None,
) -> tuple[ComposeResult, Entry]:
    """Compose ``target`` + ``head`` into a staging folder of the library, then add the
    result as a composite entry. Nothing is left behind on failure or cancel."""
    name, first = composite_name(target)
    work = library.root / WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    try:
        res = compose(
            target,
            head,
            work / first,
            overwrite=True,
            cancel=cancel,
            progress=(lambda done, total: progress(done / max(total, 1))) if progress else None,
        )
        entry = library.add(
            res.outputs, name=name, provenance={"source": "compose", "target": str(target), "head": str(head)}
        )
    finally:
        for leftover in work.glob("*"):  # a cancel or failure (compose removed its own temp files)
            leftover.unlink(missing_ok=True)
    entry.kind, entry.mtp = EntryKind.COMPOSITE, MtpStatus.COMPOSITE
    library.update(entry)
    return res, entry
