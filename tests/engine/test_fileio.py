"""Atomic writes: the old file or the new one, never a part, and no temp file left."""

from __future__ import annotations

import os
import stat

import pytest

from engine.fileio import write_atomic, write_json_atomic


def test_replaces_whole_and_leaves_no_temp_file(tmp_path):
    p = tmp_path / "sub" / "f.json"
    write_json_atomic(p, {"a": 1})
    write_json_atomic(p, {"a": 2}, indent=2, fsync=False)
    assert p.read_text() == '{\n  "a": 2\n}' and [x.name for x in p.parent.iterdir()] == ["f.json"]


def test_mode_is_applied_to_the_new_file(tmp_path):
    p = tmp_path / "secret"
    write_atomic(p, b"x", mode=0o600)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600


def test_a_failed_write_keeps_the_old_file_and_cleans_up(tmp_path, monkeypatch):
    p = tmp_path / "f"
    write_atomic(p, "old")

    def boom(*_a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(p, "new")
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["f"]
