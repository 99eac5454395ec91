"""Multimodal projectors (``mmproj`` GGUFs) as files of the library and of the Hub: what a
projector's library entry records, and whether a projector fits a model, on the remote
headers before anything is downloaded and on the files before they are paired.

The facts and the fit rule are :mod:`engine.gguf.projector`'s (the projector's output width
must be the text model's input embedding width, as ``mtmd_init_from_file`` checks it);
this module applies them to library entries and to Hub files. Called on whatever thread
runs a pull or a library write (the library's lock is held by its caller).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from engine.errors import GGUFError, ProjectorMismatchError
from engine.gguf.filetype import quantization
from engine.gguf.projector import ProjectorFacts, facts_of, is_projector, n_embd_inp, pair_problem, read_projector
from engine.gguf.reader import read_header
from engine.gguf.report import Report
from engine.gguf.validate import check_file
from engine.hub.files import FileGroup
from engine.hub.remote import HubConfig, remote_gguf_header

#: (repo, revision, file group): a file set on the Hub
Where = tuple[str, str, FileGroup]


class _Entry(Protocol):
    """What is read of a library entry (:class:`engine.hub.library.Entry`, which imports
    this module)."""

    name: str
    kind: str

    def path(self, root: Path) -> Path: ...


def is_projector_file(path: Path) -> bool:
    """Whether ``path`` is a projector by its header (``general.architecture`` ``clip``)."""
    return is_projector(path)


def projector_summary(path: Path) -> dict:
    """A projector entry's summary (its ``entry.json``): what it reads, how wide its output
    is, its type and quantization. Raises :class:`GGUFError` when the file is not a
    projector libmtmd could load (its structure, then what libmtmd reads of it)."""
    h = read_header(path)
    report = Report(files=[str(path)])
    check_file(h, report)
    if not report.valid:
        err = report.errors[0]
        raise GGUFError(str(err), file=str(path), code=err.code)
    facts = read_projector(path)
    quant, _ = quantization(h, None)
    return {
        "architecture": h.architecture or "clip",
        "name": facts.name,
        "projector_type": " + ".join(t for t in (facts.projector_type, facts.audio_projector_type) if t),
        "modalities": list(facts.modalities),
        "output_width": facts.output_width,
        "quantization": quant,
        "parameters": sum(t.n_elements for t in h.tensors),
        "size_bytes": h.file_size,
    }


def check_projector_pair(model: _Entry, projector: _Entry, root: Path) -> None:
    """``projector`` (an entry) fits ``model`` (an entry) by their files' headers; raises
    :class:`ProjectorMismatchError` in words when not."""
    if projector.kind != "projector":
        raise ProjectorMismatchError(
            f"{projector.name} is not a multimodal projector (it is a {projector.kind}): pick the model's "
            "mmproj file as its projector"
        )
    if model.kind not in ("model", "composite"):
        raise ProjectorMismatchError(
            f"{model.name} is a {model.kind}, not a model: a projector goes with the model that reads its images"
        )
    problem = pair_problem(model.path(root), projector.path(root))
    if problem is not None:
        raise ProjectorMismatchError(f"{problem}. The projector was not paired with {model.name}.")


def read_remote_projector(cfg: HubConfig, repo_id: str, path: str, revision: str) -> ProjectorFacts:
    """A Hub file's projector facts, from its header (ranged requests: nothing is
    downloaded). Raises :class:`GGUFError` in words when it is not a projector."""
    return facts_of(remote_gguf_header(cfg, repo_id, path, revision))


def remote_pair_problem(cfg: HubConfig, model: Where, projector: Where) -> str | None:
    """None when the Hub's ``projector`` fits the Hub's ``model`` by their headers (read
    with ranged requests, before anything is downloaded), else a sentence saying why not."""
    (mrepo, mrev, mgroup), (prepo, prev, pgroup) = model, projector
    pname, mname = pgroup.name.rsplit("/", 1)[-1], mgroup.name.rsplit("/", 1)[-1]
    try:
        facts = read_remote_projector(cfg, prepo, pgroup.files[0].path, prev)
    except GGUFError as e:
        return e.bare_message
    width = n_embd_inp(remote_gguf_header(cfg, mrepo, mgroup.files[0].path, mrev))
    if width is None:
        return f"{mname} does not state its embedding width, so {pname} cannot be checked against it"
    if width != facts.output_width:
        return (
            f"{pname} makes {facts.output_width}-wide embeddings but {mname} takes {width}: "
            f"download the projector made for {mname}"
        )
    return None
