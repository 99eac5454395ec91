"""The library on disk: import, delete, disk use, a manifest that rebuilds itself; and
the hub commands of the CLI against the fake Hub."""

from __future__ import annotations

import json

import pytest

from engine.errors import GGUFError
from engine.hub.library import Library, LibraryError
from engine.hub.pull import pull
from tests.engine.cli_helpers import mtp_studio


def test_import_validates_and_keeps_the_source(fixtures, library, tmp_path):
    e = library.import_file(fixtures["partial"].path)
    assert e.kind == "model" and e.mtp == "integrated" and e.provenance["source"] == "import"
    assert e.path(library.root).read_bytes() == fixtures["partial"].path.read_bytes()
    assert fixtures["partial"].path.exists()
    h = library.import_file(fixtures["partial"].head)
    assert h.kind == "head" and h.mtp == "external head"
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(GGUFError):
        library.import_file(bad)
    assert len(library.entries()) == 2 and library.total_size() == e.size + h.size


def test_delete_never_touches_anything_outside(fixtures, library, tmp_path):
    outside = tmp_path / "keep.txt"
    outside.write_text("mine")
    e = library.import_file(fixtures["full"].path)
    folder = library.root / e.id
    library.delete(e.id)
    assert not folder.exists() and outside.read_text() == "mine" and fixtures["full"].path.exists()
    with pytest.raises(LibraryError, match="No model"):
        library.delete(e.id)
    # an entry whose folder is a symlink to somewhere else is refused
    (tmp_path / "elsewhere").mkdir()
    (library.root / "evil").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    e2 = library.import_file(fixtures["full"].path)
    library._save([e2.__class__(**{**e2.__dict__, "id": "evil"})])
    # a symlinked entry folder is never listed (the index is rebuilt without it), so it
    # cannot be deleted through
    with pytest.raises(LibraryError, match="No model 'evil'"):
        library.delete("evil")
    assert (tmp_path / "elsewhere").exists()


def test_manifest_rebuilds_from_records_and_from_headers(cfg, library):
    res = pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0", head="acme/Tiny-GGUF")
    before = {e.id: e for e in library.entries()}
    (library.root / "library.json").unlink()
    after = {e.id: e for e in Library(library.root).entries()}
    assert after == before  # provenance and the pair survive (entry.json records)
    (library.root / "library.json").write_text("{corrupt")
    (library.root / res.model.id / "entry.json").unlink()
    rebuilt = {e.id: e for e in Library(library.root).entries()}
    assert set(rebuilt) == set(before)
    m = rebuilt[res.model.id]
    assert m.provenance == {"source": "found"} and m.mtp == "none" and m.size == before[res.model.id].size


def test_cli_search_pull_models_rm(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    out = json.loads(mtp_studio("search", "tiny", "--files", "--json", check=True).stdout)
    assert out[0]["repo"] == "acme/Tiny-GGUF"
    files = {f["name"]: f for f in out[0]["files"]}
    assert files["mtp-tiny-F16.gguf"]["mtp_head"] is True and files["mtp-tiny-F16.gguf"]["fit"] is None
    fit = files["tiny-F16.gguf"]["fit"]  # judged from the remote header, nothing downloaded
    assert fit["verdict"] != "none" and fit["max_ctx"] == 4096 and fit["devices"][0]["need_bytes"] > 0
    monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", "1G")  # all of it is kept free: nothing fits
    text = mtp_studio("search", "tiny", "--files", check=True).stdout
    assert "[does not fit]" in text
    monkeypatch.delenv("MTP_STUDIO_HOST_MEMORY")
    res = json.loads(
        mtp_studio(
            "pull", "acme/Sharded-GGUF", "--head", "acme/Sharded-GGUF:mtp-tiny.gguf", "--json", check=True
        ).stdout
    )
    assert len(res["model"]["files"]) == 3 and res["head"]["pair"] == res["model"]["id"]
    models = json.loads(mtp_studio("models", "--json", check=True).stdout)
    assert {m["id"] for m in models["models"]} == {res["model"]["id"], res["head"]["id"]}
    assert models["total_bytes"] == res["model"]["size"] + res["head"]["size"]
    assert mtp_studio("rm", res["head"]["id"], check=True).returncode == 0
    models = json.loads(mtp_studio("models", "--json", check=True).stdout)
    assert [m["pair"] for m in models["models"]] == [None]
    p = mtp_studio("pull", "acme/Broken-GGUF")
    assert p.returncode == 1 and "nothing was downloaded" in p.stderr
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    p = mtp_studio("search", "tiny")
    assert p.returncode == 1 and "Offline" in p.stderr


def test_import_on_a_fresh_install_makes_the_library(fixtures, tmp_path):
    """The first command a new user may type: the library folder does not exist yet, and
    its free space is measured on the disk it will be made on (it was a traceback:
    ``FileNotFoundError`` from ``shutil.disk_usage``)."""
    home = tmp_path / "fresh"
    proc = mtp_studio("import", str(fixtures["full"].path), env={"MTP_STUDIO_HOME": str(home)})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "imported" in proc.stdout and list(home.rglob("*.gguf"))


def test_an_entrys_stored_records_are_read_through_typed_views():
    """Readers outside the library see an entry's header facts and origin as values
    (Entry.facts, Entry.origin), not its stored dicts."""
    from engine.hub.library import Entry, EntryKind

    hub = Entry(
        "x",
        "X",
        ["x.gguf"],
        EntryKind.MODEL,
        "integrated",
        1,
        {"source": "hub", "repo": "acme/X-GGUF", "revision": "abc"},
        {"architecture": "qwen35", "main_quant_type": "Q4_K", "context_length": 4096, "parameters": 5_000_000},
    )
    assert (hub.facts.architecture, hub.facts.quantization, hub.facts.context_length) == ("qwen35", "Q4_K", 4096)
    assert hub.origin.label == "acme/X-GGUF" and hub.origin.revision == "abc"
    imported = Entry("y", "Y", ["y.gguf"], EntryKind.MODEL, "none", 1, {"source": "import", "path": "/m/y.gguf"})
    assert imported.origin.label == "y.gguf" and imported.facts.quantization == ""
    assert Entry("z", "Z", ["z.gguf"], EntryKind.MODEL, "none", 1, {"source": "found"}).origin.label == "found"
