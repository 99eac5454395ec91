"""Pulling a model (and its MTP head, and its multimodal projector) from the Hub into the
library.

Pick the file or shard set (by name or quantization), check a requested head or projector
against the target from the remote headers before any download, check the disk, download
every file (resumable, verified), and only then move the complete set into the library: a
sharded set is all or nothing. The library then pairs them (a projector is checked again on
the files). Offline, a pull is answered from the library.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import HeadMismatchError, ProjectorMismatchError
from engine.gguf.pairing import Summary, check_pair
from engine.gguf.validate import validate_path
from engine.hub.download import FileProgress, Target, check_space, check_target, download, partial_size
from engine.hub.files import FileGroup, head_for, projector_for
from engine.hub.library import Entry, EntryKind, Library
from engine.hub.projectors import remote_pair_problem
from engine.hub.remote import HubConfig, HubError, OfflineError, list_gguf, read_remote_header


@dataclass
class PullProgress:
    """Overall progress of a pull, plus the file being fetched."""

    file: FileProgress
    done: int
    total: int
    started: float

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


@dataclass
class PullResult:
    model: Entry
    head: Entry | None
    already_local: bool
    #: the model's projector (it reads images with it), when one was asked for
    projector: Entry | None = None

    def to_json(self) -> dict:
        out = {
            "model": self.model.__dict__,
            "head": self.head.__dict__ if self.head else None,
            "projector": self.projector.__dict__ if self.projector else None,
            "already_local": self.already_local,
        }
        if self.head is not None:
            out["compose_hint"] = "mtp-studio compose --target <model file> --head <head file> --out composite.gguf"
        return out


def choose_group(groups: list[FileGroup], *, file: str | None, quant: str | None, head: bool) -> FileGroup:
    pool = [g for g in groups if g.head == head and not g.projector] or groups
    if file is not None:
        for g in groups:
            if file in (g.name, g.name.rsplit("/", 1)[-1]) or any(
                file in (f.path, f.path.rsplit("/", 1)[-1]) for f in g.files
            ):
                return g
        raise HubError(f"No GGUF file {file!r} in this repo. Files: " + ", ".join(g.name for g in groups))
    if quant is not None:
        match = [g for g in pool if (g.quant or "").upper() == quant.upper()]
        if len(match) == 1:
            return match[0]
        if not match:
            quants = sorted({g.quant for g in pool if g.quant})
            raise HubError(f"No {quant} file in this repo; available: {', '.join(quants) or 'none recognised'}")
        raise HubError(f"Several {quant} files: " + ", ".join(g.name for g in match) + "; pick one with --file")
    if len(pool) == 1:
        return pool[0]
    what = "MTP head" if head else "model"
    raise HubError(
        f"This repo has several {what} files; pick one with --file or --quant: " + ", ".join(g.name for g in pool)
    )


def _pairing_head(
    cfg: HubConfig, model: tuple[str, str, FileGroup], repo: str, rev: str, groups: list[FileGroup]
) -> FileGroup:
    """Of a repo's several heads or drafters, the one made for ``model``: those whose
    remote headers pair with the model's, and of those the one :func:`head_for` picks by
    name (several sizes' drafters, each in several quantizations, often share a repo)."""
    pairing, why = [], []
    target = _remote_summary(cfg, model)  # read once, checked against every head
    for g in groups:
        if not g.head or not g.complete:
            continue
        try:
            _check_pair(cfg, target, (repo, rev, g))
        except HeadMismatchError as e:
            why.append(f"{g.name}: {e}")
            continue
        pairing.append(g)
    chosen = head_for(pairing, model[2])
    if chosen is None:
        raise HeadMismatchError(f"None of the MTP heads in {repo} is made for {model[2].name}: " + "; ".join(why))
    return chosen


def _projector_plan(
    cfg: HubConfig, model: tuple[str, str, FileGroup], mmproj: bool | str, groups: list[FileGroup]
) -> tuple[str, str, FileGroup]:
    """Where the model's projector is: ``mmproj`` True, the model repo's own (chosen as
    llama.cpp's ``-hf`` does: :func:`projector_for`); ``FILE`` or ``REPO:FILE``, that one.
    Its header is checked against the model's before anything is downloaded."""
    repo, rev, group = model
    prepo, pfile = repo, None
    if isinstance(mmproj, str):
        r, sep, f = mmproj.rpartition(":")
        prepo, pfile = (r, f) if sep else (repo, mmproj)
    prev, pgroups = (rev, groups) if prepo == repo else list_gguf(cfg, prepo, None)
    if pfile:
        pgroup = next((g for g in pgroups if pfile in (g.name, g.name.rsplit("/", 1)[-1])), None)
        if pgroup is None:
            found = ", ".join(g.name for g in pgroups if g.projector) or "none"
            raise HubError(f"No file {pfile!r} in {prepo}. Its projector (mmproj) files: {found}.")
    else:
        pgroup = projector_for(pgroups, group)
        if pgroup is None:
            raise HubError(
                f"{prepo} has no projector (a GGUF with mmproj in its name) for {group.name}; download the model "
                "without one, or name one: --mmproj REPO:FILE"
            )
    problem = remote_pair_problem(cfg, model, (prepo, prev, pgroup))
    if problem is not None:
        raise ProjectorMismatchError(f"{problem}. Nothing was downloaded.")
    return prepo, prev, pgroup


def _targets(repo: str, rev: str, group: FileGroup) -> list[Target]:
    if not group.complete:
        have = ", ".join(f.path for f in group.files)
        raise HubError(
            f"{group.name} is a set of {group.expected_shards} shards but the repo has only {len(group.files)} "
            f"({have}); "
            "nothing was downloaded."
        )
    targets = [Target(repo, f.path, rev, f.size, f.sha256, f.blob_id) for f in group.files]
    for t in targets:
        check_target(t)  # a listing must not steer a download outside its folder
    return targets


def _remote_summary(cfg: HubConfig, where: tuple[str, str, FileGroup]) -> Summary:
    repo, rev, group = where
    return Summary.of_remote(group.name, read_remote_header(cfg, repo, group.files[0].path, rev))


def _check_pair(cfg: HubConfig, model: tuple[str, str, FileGroup] | Summary, head: tuple[str, str, FileGroup]) -> None:
    """The pairing rule on the remote headers (``model``'s, or its summary already read),
    before anything is downloaded."""
    m = model if isinstance(model, Summary) else _remote_summary(cfg, model)
    check_pair(m, _remote_summary(cfg, head))


def pull(
    cfg: HubConfig,
    library: Library,
    repo_id: str,
    *,
    file: str | None = None,
    quant: str | None = None,
    revision: str | None = None,
    head: str | None = None,
    mmproj: bool | str = False,
    progress: Callable[[PullProgress], None] | None = None,
    cancel: threading.Event | None = None,
) -> PullResult:
    """``head`` is ``REPO`` or ``REPO:FILE`` (its MTP head file). ``mmproj``: also the
    model's multimodal projector, so that it reads images: True takes the repo's projector
    made for the model's file (as llama.cpp's ``-hf`` picks it), ``FILE`` or ``REPO:FILE``
    names one; a projector that does not fit the model is refused before any download."""
    if cfg.offline:
        return _offline(library, repo_id, file, head, mmproj)
    rev, groups = list_gguf(cfg, repo_id, revision)
    if not groups:
        raise HubError(f"{repo_id} has no GGUF files.")
    group = choose_group(groups, file=file, quant=quant, head=False)
    if group.projector:
        raise HubError(
            f"{group.name} is a multimodal projector, not a model: it is downloaded with its model, e.g. "
            f"`mtp-studio pull {repo_id} MODEL.gguf --mmproj {group.name}`"
        )
    plan = {"model": (repo_id, rev, group)}
    if head is not None:
        head_repo, _, head_file = head.partition(":")
        hrev, hgroups = (rev, groups) if head_repo == repo_id else list_gguf(cfg, head_repo, None)
        if head_file or sum(g.head for g in hgroups) <= 1:
            hgroup = choose_group(hgroups, file=head_file or None, quant=None, head=True)
            _check_pair(cfg, plan["model"], (head_repo, hrev, hgroup))
        else:
            hgroup = _pairing_head(cfg, plan["model"], head_repo, hrev, hgroups)
        plan["head"] = (head_repo, hrev, hgroup)
    if mmproj:
        plan["projector"] = _projector_plan(cfg, plan["model"], mmproj, groups)

    sets = [(r, v, g, _targets(r, v, g)) for r, v, g in plan.values()]
    existing = [library.find_provenance(r, v, [t.path for t in ts]) for r, v, _, ts in sets]
    missing = sum(
        t.size - partial_size(library.partial_dir, t)
        for (_, _, _, ts), e in zip(sets, existing)
        if e is None
        for t in ts
    )
    check_space(library.root, missing, library.space_left())

    total = sum(t.size for (_, _, _, ts), e in zip(sets, existing) if e is None for t in ts)
    done_before = 0
    started = time.monotonic()
    entries: list[Entry] = []
    for role, (r, v, g, ts), have in zip(plan, sets, existing):
        if have is not None:
            entries.append(have)
            continue
        paths = []
        for t in ts:

            def report(fp: FileProgress, base=done_before) -> None:
                if progress is not None:
                    progress(PullProgress(fp, base + fp.done, total, started))

            paths.append(download(cfg, t, library.partial_dir, progress=report, cancel=cancel))
            done_before += t.size
        # every file of the set is verified: now (and only now) it enters the library
        name = g.name.rsplit("/", 1)[-1].removesuffix(".gguf").split("-00001-of-")[0]
        if role == "projector":  # "mmproj-F16" says little in a library of several repos' projectors
            name = f"{r.rsplit('/', 1)[-1].removesuffix('-GGUF')}-{name}"
        provenance = {
            "source": "hub",
            "repo": r,
            "revision": v,
            "files": [{"path": t.path, "sha256": t.sha256, "size": t.size} for t in ts],
            "endpoint": cfg.endpoint,
        }
        names = [t.path.rsplit("/", 1)[-1] for t in ts]
        entries.append(library.add(paths, name=name, provenance=provenance, names=names))
    got = dict(zip(plan, entries))
    model, head_entry, projector = got["model"], got.get("head"), got.get("projector")
    if head_entry is not None:
        _check_local_pair(library, model, head_entry)
        library.pair(model.id, head_entry.id)
        head_entry = library.get(head_entry.id)
    if projector is not None:
        library.attach_projector(model.id, projector.id)  # checked again, on the files
    return PullResult(library.get(model.id), head_entry, all(e is not None for e in existing), projector)


def _check_local_pair(library: Library, model: Entry, head: Entry) -> None:
    """The pairing rule on the local files: now also the tokens, byte for byte."""
    _, _, mset = validate_path(model.path(library.root))
    _, _, hset = validate_path(head.path(library.root))
    assert mset is not None and hset is not None
    check_pair(Summary.of_set(mset), Summary.of_set(hset))


def _offline(library: Library, repo_id: str, file: str | None, head: str | None, mmproj: bool | str) -> PullResult:
    def find(repo: str, name: str | None, kind: EntryKind) -> Entry | None:
        for e in library.entries():
            p = e.provenance
            if p.get("source") == "hub" and p.get("repo") == repo and e.kind == kind:
                paths = [f["path"] for f in p.get("files", [])]
                if name is None or any(name in (x, x.rsplit("/", 1)[-1]) for x in paths):
                    return e
        return None

    model = find(repo_id, file, EntryKind.MODEL)
    if model is None:
        raise OfflineError(f"Offline, and {repo_id} is not in the library yet.")
    head_entry = None
    if head is not None:
        hr, _, hf = head.partition(":")
        head_entry = find(hr, hf or None, EntryKind.HEAD)
        if head_entry is None:
            raise OfflineError(f"Offline, and the head {head} is not in the library yet.")
    # the model's own projector answers "with vision"; a named one must be the one named
    projector = library.projector_of(model) if mmproj is True else None
    if mmproj and projector is None:
        prepo, pfile = repo_id, None
        if isinstance(mmproj, str):
            r, sep, f = mmproj.rpartition(":")
            prepo, pfile = (r, f) if sep else (repo_id, mmproj)
        projector = find(prepo, pfile, EntryKind.PROJECTOR)
        if projector is None:
            raise OfflineError(f"Offline, and no projector of {prepo} is in the library yet.")
        if model.projector != projector.id:
            model = library.attach_projector(model.id, projector.id)
    return PullResult(model, head_entry, True, projector)
