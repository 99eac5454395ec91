"""Search, remote headers, verified downloads, shards, pairing — against the fake Hub,
with the real huggingface_hub client over real HTTP."""

from __future__ import annotations

import hashlib
import threading

import pytest

from engine.errors import Cancelled, DiskSpaceError, HeadMismatchError
from engine.gguf.compose import compose
from engine.hub.download import ChecksumError, Target, download, partial_paths
from engine.hub.library import Library
from engine.hub.pull import pull
from engine.hub.remote import HubConfig, HubError, OfflineError, RepoNotFound, list_gguf, read_remote_header, search
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from tests.engine.hub.fakehub import Fault


def test_search_lists_gguf_repos_by_downloads(cfg):
    hits = search(cfg, "gguf")
    assert [h.repo_id for h in hits] == ["acme/Sharded-GGUF", "acme/Tiny-GGUF", "acme/Broken-GGUF", "other/Other-GGUF"]
    assert hits[0].downloads == 900


def test_repo_files_grouped_by_quant_shards_and_heads(cfg):
    rev, groups = list_gguf(cfg, "acme/Sharded-GGUF")
    assert len(rev) == 40
    names = [(g.name, g.quant, g.head, len(g.files), g.complete) for g in groups]
    assert names == [
        ("tiny-Q8_0-00001-of-00003.gguf", "Q8_0", False, 3, True),
        ("mtp-tiny.gguf", None, True, 1, True),
    ]
    _, groups = list_gguf(cfg, "acme/Broken-GGUF")
    assert not groups[0].complete and groups[0].expected_shards == 3


def test_remote_header_before_download(cfg, hub):
    h = read_remote_header(cfg, "acme/Tiny-GGUF", "mtp-tiny-F16.gguf", "main")
    assert h.architecture == "qwen35" and h.nextn_layers == 1 and h.mtp == "head-only"
    assert h.context_length == 4096 and h.vocab_size == 439
    full = read_remote_header(cfg, "acme/Tiny-GGUF", "tiny-F16.gguf", "main")
    assert full.mtp == "integrated"
    size = len(hub.repos["acme/Tiny-GGUF"].files["tiny-F16.gguf"].data)
    assert hub.body_bytes("tiny-F16.gguf") < size / 2  # only the header was fetched


def test_pull_single_file_with_provenance(cfg, library, hub):
    res = pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    e = res.model
    repo = hub.repos["acme/Tiny-GGUF"]
    f = repo.files["tiny-Q8_0.gguf"]
    assert e.kind == "model" and e.mtp == "none" and e.size == len(f.data)
    assert e.provenance["repo"] == "acme/Tiny-GGUF" and e.provenance["revision"] == repo.sha
    assert e.provenance["files"] == [{"path": "tiny-Q8_0.gguf", "sha256": f.sha256, "size": len(f.data)}]
    assert hashlib.sha256(e.path(library.root).read_bytes()).hexdigest() == f.sha256
    assert e.summary["architecture"] == "qwen35"
    again = pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    assert again.already_local and again.model.id == e.id and hub.body_bytes("tiny-Q8_0.gguf") == len(f.data)


def test_pull_sharded_target_and_head_then_compose_runs_with_mtp(cfg, library, tmp_path):
    res = pull(cfg, library, "acme/Sharded-GGUF", head="acme/Sharded-GGUF")
    model, head = res.model, res.head
    assert len(model.files) == 3 and model.pair == head.id and head.pair == model.id
    assert head.kind == "head" and head.mtp == "external head"
    out = tmp_path / "composite-00001-of-00003.gguf"
    compose(model.path(library.root), head.path(library.root), out)
    lm = load(LoadSpec(out, mtp=MtpSource.INTEGRATED))
    try:
        prompt = lm.model.tokenize("Hello from the Hub")
        spec = generate(lm.session, prompt, DecodeParams(max_tokens=32, depth=FixedDepth(2)))
        plain = generate(lm.session, prompt, DecodeParams(max_tokens=32))
        assert spec.tokens == plain.tokens and spec.stats.accepted > 0
    finally:
        lm.close()


def test_head_from_another_model_is_refused_before_downloading(cfg, library, hub):
    with pytest.raises(HeadMismatchError, match="vocabulary"):
        pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0", head="other/Other-GGUF")
    assert library.entries() == []
    # only the two headers were read (ranged), never the file
    assert all(e.range and e.range.startswith("bytes=0-") for e in hub.gets("tiny-Q8_0.gguf"))
    assert hub.body_bytes("tiny-Q8_0.gguf") < len(hub.repos["acme/Tiny-GGUF"].files["tiny-Q8_0.gguf"].data)


def test_missing_shard_downloads_nothing(cfg, library, hub):
    with pytest.raises(HubError, match="set of 3 shards but the repo has only 2"):
        pull(cfg, library, "acme/Broken-GGUF")
    assert library.entries() == [] and not [e for e in hub.log if e.method == "GET" and e.file]


def test_dropped_connection_resumes_without_refetching(cfg, library, hub):
    from engine.hub.download import STREAM_CHUNK

    name = "tiny-Q8_0.gguf"
    size = len(hub.repos["acme/Tiny-GGUF"].files[name].data)
    drop = 5 * STREAM_CHUNK + 1000
    hub.faults[name] = Fault(drop_after=drop)
    res = pull(cfg, library, "acme/Tiny-GGUF", file=name)
    assert res.model.size == size
    gets = hub.gets(name)
    assert len(gets) == 2 and gets[1].range == f"bytes={5 * STREAM_CHUNK}-"
    # nothing re-fetched beyond the chunk that was interrupted
    assert hub.body_bytes(name) - size == drop - 5 * STREAM_CHUNK < STREAM_CHUNK


def test_500_is_retried(cfg, library, hub):
    hub.faults["tiny-Q8_0.gguf"] = Fault(status=500)
    pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    assert [g.status for g in hub.gets("tiny-Q8_0.gguf")] == [500, 200]


def test_429_honours_retry_after(cfg, library, hub):
    hub.faults["tiny-Q8_0.gguf"] = Fault(status=429, retry_after=1)
    pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    g = hub.gets("tiny-Q8_0.gguf")
    assert [x.status for x in g] == [429, 200] and g[1].t - g[0].t >= 0.95


def test_corrupt_bytes_never_enter_the_library(cfg, library, hub):
    hub.faults["tiny-Q8_0.gguf"] = Fault(corrupt=True)
    with pytest.raises(ChecksumError, match="SHA-256"):
        pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    assert library.entries() == []
    assert not list(library.partial_dir.rglob("*.part"))


def _cancelled_half_way(cfg, library, hub, name: str) -> tuple[Target, int]:
    """Pull ``name`` slowly and cancel it a quarter of the way in; returns its target and
    the bytes kept in the partial file."""
    size = len(hub.repos["acme/Tiny-GGUF"].files[name].data)
    hub.faults[name] = Fault(slow=0.02, times=10**6)
    cancel = threading.Event()

    def progress(p):
        if p.done > size // 4:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(cfg, library, "acme/Tiny-GGUF", file=name, progress=progress, cancel=cancel)
    del hub.faults[name]
    t = Target("acme/Tiny-GGUF", name, hub.repos["acme/Tiny-GGUF"].sha, size, None)
    part, _ = partial_paths(library.partial_dir, t)
    return t, part.stat().st_size


def test_a_partial_damaged_on_disk_is_caught_after_the_resume(cfg, library, hub):
    # the resumed download hashes the bytes already on disk as well as the new ones
    name = "tiny-F16.gguf"
    t, kept = _cancelled_half_way(cfg, library, hub, name)
    part, _ = partial_paths(library.partial_dir, t)
    with open(part, "r+b") as f:
        f.seek(kept // 2)
        byte = f.read(1)
        f.seek(kept // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ChecksumError, match="SHA-256"):
        pull(cfg, library, "acme/Tiny-GGUF", file=name)
    assert library.entries() == [] and not part.exists()
    assert hub.gets(name)[-1].range == f"bytes={kept}-"  # it did resume, not start over


def test_a_server_that_ignores_range_still_gives_a_verified_file(cfg, library, hub):
    name = "tiny-F16.gguf"
    t, kept = _cancelled_half_way(cfg, library, hub, name)
    hub.faults[name] = Fault(ignore_range=True)
    res = pull(cfg, library, "acme/Tiny-GGUF", file=name)
    last = hub.gets(name)[-1]
    assert last.range == f"bytes={kept}-" and last.status == 200 and last.sent == t.size  # sent it all again
    data = hub.repos["acme/Tiny-GGUF"].files[name].data
    assert res.model.size == t.size and res.model.path(library.root).read_bytes() == data


def test_cancel_keeps_the_partial_and_a_restart_fetches_only_the_rest(cfg, library, hub, tmp_path):
    name = "tiny-F16.gguf"
    size = len(hub.repos["acme/Tiny-GGUF"].files[name].data)
    hub.faults[name] = Fault(slow=0.02, times=10**6)
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(p.done)
        if p.done > size // 4:
            cancel.set()

    with pytest.raises(Cancelled):
        pull(cfg, library, "acme/Tiny-GGUF", file=name, progress=progress, cancel=cancel)
    assert library.entries() == []
    t = Target("acme/Tiny-GGUF", name, hub.repos["acme/Tiny-GGUF"].sha, size, None)
    part, _ = partial_paths(library.partial_dir, t)
    kept = part.stat().st_size
    assert size // 4 < kept < size and seen == sorted(seen)
    # "restart": a new library object and config, as a new process would have
    del hub.faults[name]
    res = pull(HubConfig.from_env(), Library(library.root), "acme/Tiny-GGUF", file=name)
    assert res.model.size == size
    resumed = hub.gets(name)[-1]
    assert resumed.range == f"bytes={kept}-" and resumed.sent == size - kept  # only the missing bytes
    assert not part.exists()


def test_a_full_disk_is_refused_before_any_byte(cfg, hub, tmp_path):
    tiny = Library(tmp_path / "lib", limit_bytes=10_000)
    with pytest.raises(DiskSpaceError, match="Not enough disk space"):
        pull(cfg, tiny, "acme/Tiny-GGUF", quant="Q8_0")
    assert hub.body_bytes("tiny-Q8_0.gguf") == 0 and tiny.entries() == []


def test_unknown_repo_and_file(cfg, library):
    with pytest.raises(RepoNotFound, match="not found"):
        pull(cfg, library, "acme/Nope")
    with pytest.raises(HubError, match="No GGUF file 'x.gguf'"):
        pull(cfg, library, "acme/Tiny-GGUF", file="x.gguf")
    with pytest.raises(HubError, match="several model files"):
        pull(cfg, library, "acme/Tiny-GGUF")


def test_offline_mode_uses_only_the_library(cfg, library, hub):
    pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0", head="acme/Tiny-GGUF")
    off = HubConfig(cfg.endpoint, offline=True)
    n = len(hub.log)
    res = pull(off, library, "acme/Tiny-GGUF", file="tiny-Q8_0.gguf", head="acme/Tiny-GGUF")
    assert res.already_local and res.model.kind == "model" and res.head.kind == "head"
    with pytest.raises(OfflineError):
        pull(off, library, "acme/Sharded-GGUF")
    with pytest.raises(OfflineError):
        search(off, "x")
    assert len(hub.log) == n  # nothing was asked of the Hub


def test_token_is_sent_but_never_logged(hub, library, caplog):
    token = "hf_SuperSecretToken123"
    cfg = HubConfig(hub.url, token=token)
    with caplog.at_level("DEBUG"):
        pull(cfg, library, "acme/Tiny-GGUF", quant="Q8_0")
    assert token not in caplog.text and token not in repr(cfg)


def test_download_verifies_small_non_lfs_files_by_git_hash(cfg, library, hub):
    f = hub.repos["acme/Tiny-GGUF"].files["README.md"]
    t = Target("acme/Tiny-GGUF", "README.md", hub.repos["acme/Tiny-GGUF"].sha, len(f.data), None, f.blob_id)
    path = download(cfg, t, library.partial_dir)
    assert path.read_bytes() == f.data


def test_remote_memory_estimate_equals_the_local_one(cfg, hub, tmp_path):
    """The will-it-fit figures of a file before download (headers by ranged requests, every
    shard) are those of the downloaded copy."""
    from engine.gguf.memory import ModelShape, estimate
    from engine.gguf.shards import open_set
    from engine.hub.remote import remote_shape

    for repo, name in (("acme/Tiny-GGUF", "tiny-F16.gguf"), ("acme/Sharded-GGUF", "tiny-Q8_0-00001-of-00003.gguf")):
        rev, groups = list_gguf(cfg, repo)
        (group,) = [g for g in groups if g.name == name]
        remote = remote_shape(cfg, repo, group, rev)
        for f in group.files:
            (tmp_path / f.path).write_bytes(hub.repos[repo].files[f.path].data)
        local = ModelShape.of_set(open_set(tmp_path / group.files[0].path))
        assert remote == local and remote.weights_bytes > 0
        for n_ctx in (512, 4096):
            assert estimate(remote, n_ctx, mtp=True) == estimate(local, n_ctx, mtp=True)
    assert hub.body_bytes("tiny-F16.gguf") < len(hub.repos["acme/Tiny-GGUF"].files["tiny-F16.gguf"].data) / 2
