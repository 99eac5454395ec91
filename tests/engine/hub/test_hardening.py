"""A Hub listing or a library folder cannot steer writes or deletes outside their folders,
and damaged records are kept aside and recovered from, never silently replaced."""

from __future__ import annotations

import json

import pytest

from engine.hub.download import Target, UnsafePathError, download, partial_paths
from engine.hub.library import Library
from engine.hub.pull import pull

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    "path",
    [
        "../victim.gguf",
        "../../victim.gguf",
        "/tmp/victim.gguf",
        "a/../../victim.gguf",
        "a\\..\\victim.gguf",
        "C:/victim.gguf",
        "a//victim.gguf",
        ".",
        "a/./b.gguf",
        "x\x00.gguf",
        "",
    ],
)
def test_unsafe_remote_paths_are_refused_before_anything_is_written(cfg, tmp_path, path):
    partial = tmp_path / "lib" / ".downloads"
    partial.mkdir(parents=True)
    victim = tmp_path / "lib" / "victim.gguf.part"
    victim.write_text("the user's file")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    t = Target("acme/Tiny-GGUF", path, SHA, 10, None)
    with pytest.raises(UnsafePathError):
        download(cfg, t, partial)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert victim.read_text() == "the user's file"


@pytest.mark.parametrize("rev", ["../../..", "main", "0123", SHA.upper(), SHA + "/.."])
def test_a_revision_must_be_a_commit_hash(tmp_path, rev):
    with pytest.raises(UnsafePathError, match="commit hash"):
        partial_paths(tmp_path, Target("acme/Tiny-GGUF", "x.gguf", rev, 1, None))


@pytest.mark.parametrize("repo", ["../evil", "acme/../../x", "acme", "/acme/x"])
def test_a_repo_id_must_be_owner_slash_name(tmp_path, repo):
    with pytest.raises(UnsafePathError, match="repo id"):
        partial_paths(tmp_path, Target(repo, "x.gguf", SHA, 1, None))


def test_a_listing_with_a_traversing_file_downloads_nothing(cfg, hub, library, hub_files):
    hub.add_repo("acme/Evil-GGUF", {"../../escape-Q8_0.gguf": hub_files["trunk"]})
    with pytest.raises(UnsafePathError, match="not safe"):
        pull(cfg, library, "acme/Evil-GGUF", quant="Q8_0")
    assert not [e for e in hub.log if e.method == "GET" and e.file]
    assert not (library.root.parent / "escape-Q8_0.gguf").exists()


def test_a_symlinked_download_folder_is_refused(tmp_path):
    partial = tmp_path / "downloads"
    partial.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (partial / "acme__Tiny-GGUF").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(UnsafePathError, match="outside"):
        partial_paths(partial, Target("acme/Tiny-GGUF", "x.gguf", SHA, 1, None))


# ------------------------------------------------------------------------ library
def test_a_corrupt_entry_record_is_kept_aside_and_its_provenance_recovered(cfg, library):
    res = pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    folder = library.root / res.model.id
    record = json.loads((folder / "entry.json").read_text())
    record["size"] = "big"  # wrong type: the record is damaged, the provenance is fine
    (folder / "entry.json").write_text(json.dumps(record))
    (library.root / "library.json").unlink()
    (e,) = Library(library.root).entries()
    assert (folder / "entry.json.bad").is_file()
    assert e.provenance["repo"] == "acme/Tiny-GGUF" and e.provenance["files"]
    assert e.provenance["source"] == "hub" and e.provenance["recovered_from"] == "entry.json.bad"
    assert e.size == res.model.size


def test_an_unreadable_entry_record_is_kept_aside(fixtures, library):
    e = library.import_file(fixtures["partial"].path)
    folder = library.root / e.id
    (folder / "entry.json").write_text("{not json")
    (library.root / "library.json").unlink()
    (again,) = Library(library.root).entries()
    assert (folder / "entry.json.bad").read_text() == "{not json"
    assert again.id == e.id and again.provenance["recovered_from"] == "entry.json.bad"


@pytest.mark.parametrize(
    "index",
    [
        {"version": 1, "entries": [{"id": 5}]},
        {"version": 1, "entries": "x"},
        [],
        {"version": 1, "entries": [{"size": "1"}]},
    ],
)
def test_a_wrong_type_in_the_index_rebuilds_it(fixtures, library, index):
    e = library.import_file(fixtures["partial"].path)
    (library.root / "library.json").write_text(json.dumps(index))
    entries = Library(library.root).entries()
    assert [x.id for x in entries] == [e.id] and Library(library.root).total_size() == e.size


@pytest.mark.parametrize("field,value", [("size", "huge"), ("kind", "weights"), ("mtp", "maybe"), ("kind", ["model"])])
def test_a_bad_field_in_an_index_entry_rebuilds_it(fixtures, library, field, value):
    from engine.hub.library import EntryKind, MtpStatus

    e = library.import_file(fixtures["partial"].path)
    raw = json.loads((library.root / "library.json").read_text())
    assert raw["entries"][0]["kind"] == "model" and raw["entries"][0]["mtp"] == "integrated"  # plain strings on disk
    raw["entries"][0][field] = value
    (library.root / "library.json").write_text(json.dumps(raw))
    (again,) = Library(library.root).entries()
    assert again.size == e.size and again.kind is EntryKind.MODEL and again.mtp is MtpStatus.INTEGRATED


def test_rebuilding_never_writes_through_a_symlinked_entry_folder(fixtures, library, tmp_path):
    library.import_file(fixtures["partial"].path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.gguf").write_bytes(fixtures["full"].path.read_bytes())
    (library.root / "linked").symlink_to(outside, target_is_directory=True)
    (library.root / "library.json").unlink()
    ids = [e.id for e in Library(library.root).entries()]
    assert "linked" not in ids and sorted(p.name for p in outside.iterdir()) == ["model.gguf"]
