"""A model's projector (``mmproj-*.gguf``), loaded beside it: checked by its header
against the model first (engine.gguf.projector: a malformed or mismatched file is refused
in words before libmtmd reads it), then loaded by libmtmd for the model's pictures.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from engine.errors import GGUFError, ModelNotFoundError
from engine.runtime.llama.model import Model
from engine.runtime.media.projector import Projector

log = logging.getLogger(__name__)

#: the token a family's chat template writes where a picture's rows go, by family: a
#: picture's rows enter the MTP head's cache as this token (with the target's hidden row
#: before each), so the head's first drafts after a picture see it
PLACEHOLDERS = ("<|image_pad|>", "<image_soft_token>", "<|image|>", "<image>", "<IMG_CONTEXT>", "<|vision_pad|>")


def attach_projector(lm, path: str | Path) -> None:
    """Load the projector at ``path`` for a loaded model ``lm``
    (:class:`~engine.runtime.load.loader.LoadedModel`): every session is told how a
    picture's rows enter its MTP context, and the model's info what it sees and hears."""
    projector = load_projector(path, lm.model, use_gpu=lm.spec.n_gpu_layers != 0)
    lm.projector = projector
    token = media_row_token(lm.model)
    for s in [s.session for s in lm.slots.slots] if lm.slots is not None else [lm.session]:
        s.media_row_token = token
    lm.info = replace(lm.info, projector=str(path), modalities=projector.modalities)


def check_projector(path: str | Path, model_path: str | Path) -> None:
    """The projector at ``path`` against the model at ``model_path``, from their headers
    alone (before anything loads either). Raises ModelNotFoundError, or GGUFError in words
    (not a projector, damaged, made for another model)."""
    from engine.gguf.projector import pair_problem, read_projector

    path = Path(path)
    if not path.is_file():
        raise ModelNotFoundError(f"The projector file was not found: {path}. Check the path or download it again.")
    read_projector(path)  # raises in words for a file that is not a projector
    problem = pair_problem(model_path, path)
    if problem:
        raise GGUFError(problem, file=str(path))


def load_projector(path: str | Path, model: Model, *, use_gpu: bool) -> Projector:
    """The projector at ``path`` for ``model``, checked first (:func:`check_projector`).
    Raises ModelNotFoundError, GGUFError or ModelLoadError."""
    check_projector(path, model.path)
    return Projector(Path(path), model, use_gpu=use_gpu)


def projector_size(path: str | Path | None) -> int:
    """The projector file's bytes, for the memory check (0: none, or missing: the load says so)."""
    try:
        return Path(path).stat().st_size if path is not None else 0
    except OSError:
        return 0


def media_row_token(model: Model) -> int:
    """The token a picture's rows are fed to the MTP head as: the family's image
    placeholder where the vocabulary has one, else its padding token, else token 0 (a
    vocabulary without image tokens, like the demo's: the head still sees the target's
    hidden row at every position, the part that carries the picture)."""
    for text in PLACEHOLDERS:
        ids = model.tokenize(text, add_special=False, parse_special=True)
        if len(ids) == 1:
            return ids[0]
    pad = model.pad
    return pad if 0 <= pad < model.n_vocab else 0
