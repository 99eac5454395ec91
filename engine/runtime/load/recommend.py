"""Will a remote model fit this machine, and which curated model should it download?

Plain Python, any thread, no Qt: the GUI runs these in a background task. Each remote
file group is judged from its headers alone (ranged requests,
:func:`engine.hub.remote.remote_shape`), with the same arithmetic a load uses
(:func:`engine.runtime.load.fit.assess`), so nothing is downloaded to find out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.errors import Cancelled, GGUFError, MtpStudioError
from engine.gguf.inspect import human_size
from engine.hub.files import FileGroup
from engine.hub.recommended import RECOMMENDED, candidate_groups
from engine.hub.remote import HubConfig, list_gguf, remote_shape
from engine.runtime.load import fit as fit_mod
from engine.runtime.load.fit import DeviceFree, Fit

log = logging.getLogger(__name__)

#: better placements first: all on the GPU, then some layers there, then host memory only
VERDICT_RANK = {"gpu": 0, "partial": 1, "cpu": 2, "none": 3}


@dataclass(frozen=True)
class Recommendation:
    """The best quantization of one repo for this machine."""

    repo_id: str
    revision: str
    group: FileGroup
    fit: Fit

    @property
    def size(self) -> int:
        return self.group.size

    def sort_key(self) -> tuple:
        """Better placement first, then the larger (higher-quality) file."""
        return VERDICT_RANK[self.fit.verdict], -self.size, self.repo_id, self.group.name

    def line(self) -> str:
        """The entry a list shows: "Q8_0, 28.6 GB: fits on the GPU, up to context 262144"."""
        what = self.group.quant or self.group.name
        return f"{what}, {human_size(self.size)}: {self.fit.label()}, up to context {self.fit.max_ctx}"

    def to_json(self) -> dict:
        return {
            "repo": self.repo_id,
            "revision": self.revision,
            "file": self.group.name,
            "quant": self.group.quant,
            "size_bytes": self.size,
            "fit": self.fit.to_json(),
        }


def remote_fit(
    cfg: HubConfig,
    repo_id: str,
    group: FileGroup,
    revision: str,
    n_ctx: int,
    devices: list[DeviceFree],
    *,
    depth: int = 4,
) -> Fit | None:
    """How ``group`` of ``repo_id`` would fit ``devices`` at context ``n_ctx``, from its
    headers: with MTP on when it has NextN layers (a trunk-only file loads without it).
    None: the file has no model layers to place (a vision projector)."""
    shape = remote_shape(cfg, repo_id, group, revision)
    if shape.n_layer_all == 0:
        return None
    return fit_mod.assess(shape, n_ctx, devices, mtp=shape.n_nextn > 0, depth=depth)


def ranked(recs: Iterable[Recommendation]) -> list[Recommendation]:
    """The recommendations that fit, best first."""
    return sorted((r for r in recs if r.fit.fits), key=Recommendation.sort_key)


def recommend(
    cfg: HubConfig,
    devices: list[DeviceFree],
    *,
    n_ctx: int = 4096,
    repos: Iterable[str] = RECOMMENDED,
    depth: int = 4,
    cancel: threading.Event | None = None,
    report: Callable[[str, Recommendation | Exception | None], None] | None = None,
) -> list[Recommendation]:
    """For each repo, its best quantization that fits ``devices`` at ``n_ctx`` with MTP:
    the largest file at the best placement (GPU, then partly on the GPU, then host
    memory). Returned best first; repos where nothing fits are left out. A repo that
    cannot be read (missing, offline) is skipped, not fatal, and so is a file whose header
    is not GGUF.

    ``report(repo, outcome)`` is called as each repo is done: its recommendation, None
    (nothing fits) or the error that skipped it. ``cancel`` raises :class:`Cancelled`
    between requests."""
    best_rank = 0 if any(d.kind == "gpu" for d in devices) else VERDICT_RANK["cpu"]
    room = sum(d.room for d in devices)
    out: list[Recommendation] = []
    for repo in repos:
        _check(cancel)
        try:
            rec = _best_of_repo(cfg, repo, devices, n_ctx, depth, best_rank, room, cancel)
        except Cancelled:
            raise
        except (MtpStudioError, OSError) as e:
            log.info("recommend: %s skipped: %s", repo, e)
            if report is not None:
                report(repo, e)
            continue
        if rec is not None:
            out.append(rec)
        if report is not None:
            report(repo, rec)
    return ranked(out)


def _best_of_repo(cfg, repo, devices, n_ctx, depth, best_rank, room, cancel) -> Recommendation | None:
    """Largest file first: the first that fits at the best placement this machine has
    ends the search (no smaller file can beat it), so few headers are read."""
    revision, groups = list_gguf(cfg, repo)
    best: Recommendation | None = None
    for g in candidate_groups(groups):
        if g.size > room:  # its weights alone exceed every device's room together
            continue
        _check(cancel)
        try:
            shape = remote_shape(cfg, repo, g, revision)
        except GGUFError as e:  # one unreadable file does not hide the repo's others
            log.info("recommend: %s/%s skipped: %s", repo, g.name, e)
            continue
        if shape.n_nextn == 0:  # not a model with MTP layers (a projector, a trunk-only file)
            continue
        rec = Recommendation(repo, revision, g, fit_mod.assess(shape, n_ctx, devices, mtp=True, depth=depth))
        if rec.fit.fits and (best is None or rec.sort_key() < best.sort_key()):
            best = rec
        if best is not None and VERDICT_RANK[best.fit.verdict] <= best_rank:
            break
    return best


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("Cancelled.")
