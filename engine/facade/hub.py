"""Hugging Face search and downloads (a model with its MTP head or its multimodal
projector), the recommended models, and composing a target with its MTP head into the
library, as the Models, Downloads and Compose pages use them."""

from __future__ import annotations

from engine.hub.composing import PairCheck, check_files, compose_into_library
from engine.hub.download import Target, discard_partial
from engine.gguf.pairing import HeaderFacts
from engine.gguf.projector import ProjectorFacts
from engine.hub.files import FileGroup, head_for, modality_hint, projector_for
from engine.hub.projectors import read_remote_projector
from engine.hub.pull import pull
from engine.hub.recommended import RECOMMENDED
from engine.hub.remote import HubConfig, list_gguf, read_remote_header, search

__all__ = [
    "RECOMMENDED",
    "FileGroup",
    "HeaderFacts",
    "HubConfig",
    "PairCheck",
    "ProjectorFacts",
    "Target",
    "check_files",
    "compose_into_library",
    "discard_partial",
    "head_for",
    "list_gguf",
    "modality_hint",
    "projector_for",
    "pull",
    "read_remote_header",
    "read_remote_projector",
    "search",
]
