"""Composing into the library: names, the composite entry, and nothing left behind."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.errors import Cancelled, ComposeError
from engine.hub.composing import WORK_DIR, check_files, composite_name, compose_into_library
from engine.hub.library import EntryKind, Library, MtpStatus


def test_composite_names_keep_the_shard_pattern():
    assert composite_name(Path("/m/Qwen-Q4_K_M.gguf")) == ("Qwen-Q4_K_M-mtp", "Qwen-Q4_K_M-mtp.gguf")
    assert composite_name(Path("Big-Q8_0-00001-of-00003.gguf")) == ("Big-Q8_0-mtp", "Big-Q8_0-mtp-00001-of-00003.gguf")


def test_compose_into_library_makes_a_composite_entry(fixtures, tmp_path):
    lib = Library(tmp_path / "lib")
    fx = fixtures["partial"]
    assert check_files(fx.trunk, fx.head).nextn_layers == 1
    seen = []
    res, entry = compose_into_library(lib, fx.trunk, fx.head, progress=seen.append)
    assert entry.kind is EntryKind.COMPOSITE and entry.mtp is MtpStatus.COMPOSITE and res.validation.valid
    assert entry.path(lib.root).read_bytes() == fx.path.read_bytes() and seen and seen[-1] > 0.99
    assert lib.get(entry.id).kind is EntryKind.COMPOSITE and not any((lib.root / WORK_DIR).iterdir())


def test_a_refused_or_cancelled_compose_leaves_nothing(fixtures, tmp_path):
    lib = Library(tmp_path / "lib")
    with pytest.raises(ComposeError):
        compose_into_library(lib, fixtures["partial"].trunk, fixtures["full"].trunk)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        compose_into_library(lib, fixtures["partial"].trunk, fixtures["partial"].head, cancel=cancel)
    assert lib.entries() == [] and not any((lib.root / WORK_DIR).iterdir())
