"""Recommending a download that fits: the ordering (GPU, then partly on the GPU, then
CPU; larger first), and recommend() over the fake Hub with the real huggingface_hub
client: the largest quantization that fits per repo, heads, trunk-only files and missing
repos skipped, and no more headers read than needed."""

from __future__ import annotations

import threading

import pytest

from engine.errors import Cancelled, RepoNotFound
from engine.gguf.memory import ModelShape
from engine.gguf.shards import open_set
from engine.hub.files import FileGroup, RemoteFile
from engine.hub.recommended import RECOMMENDED, candidate_groups
from engine.hub.remote import HubConfig
from engine.runtime.load import fit as fit_mod
from engine.runtime.load.fit import MARGIN_BYTES, DeviceFree
from engine.runtime.load.recommend import Recommendation, ranked, recommend
from tests.engine.hub.fakehub import FakeHub, FakeHubServer

MiB, GiB = 1 << 20, 1 << 30


def _shape(layer_mib: int, n_layers: int = 8) -> ModelShape:
    """A plain attention model with one NextN layer: ``n_layers`` trunk layers of
    ``layer_mib`` MiB each."""
    return ModelShape(
        architecture="qwen35",
        n_vocab=32000,
        n_embd=1024,
        n_ff=4096,
        n_ctx_train=32768,
        n_layer_all=n_layers + 1,
        n_nextn=1,
        kv_per_cell=(1024,) * n_layers,
        recurrent_layers=0,
        recurrent_floats=0,
        n_masks=1,
        layer_bytes=(layer_mib * MiB,) * (n_layers + 1),
        embd_bytes=64 * MiB,
        output_bytes=64 * MiB,
        other_bytes=0,
    )


def _group(name: str, size: int) -> FileGroup:
    return FileGroup(name, [RemoteFile(name, size, None, None)], "Q4_K_M", False)


def _host(free: int) -> DeviceFree:
    return DeviceFree("host memory", "cpu", 64 * GiB, free)


def _gpu(free: int) -> DeviceFree:
    return DeviceFree("GPU0", "gpu", 24 * GiB, free)


def test_ranked_puts_gpu_before_partial_before_cpu_then_larger_files():
    host = _host(32 * GiB)

    def rec(repo: str, layer_mib: int, gpu_free: int) -> Recommendation:
        shape = _shape(layer_mib)
        f = fit_mod.assess(shape, 4096, [host, _gpu(gpu_free)], mtp=True)
        return Recommendation(repo, "main", _group(f"{repo}.gguf", shape.weights_bytes), f)

    small_gpu = rec("a/small-gpu", 50, MARGIN_BYTES + 4 * GiB)
    big_gpu = rec("b/big-gpu", 200, MARGIN_BYTES + 4 * GiB)
    partial = rec("c/partial", 400, MARGIN_BYTES + 1 * GiB)  # about 2 of 9 layers fit
    huge_partial = rec("d/huge-partial", 800, MARGIN_BYTES + 1 * GiB)
    cpu = rec("e/cpu", 300, MARGIN_BYTES + 16 * MiB)  # not even the compute buffer fits the GPU
    too_big = Recommendation(
        "f/none", "main", _group("f.gguf", 1), fit_mod.assess(_shape(4000), 4096, [_host(2 * GiB)], mtp=True)
    )
    verdicts = {r.repo_id: r.fit.verdict for r in (small_gpu, big_gpu, partial, huge_partial, cpu, too_big)}
    assert verdicts == {
        "a/small-gpu": "gpu",
        "b/big-gpu": "gpu",
        "c/partial": "partial",
        "d/huge-partial": "partial",
        "e/cpu": "cpu",
        "f/none": "none",
    }
    order = ranked([cpu, too_big, small_gpu, partial, huge_partial, big_gpu])
    assert [r.repo_id for r in order] == ["b/big-gpu", "a/small-gpu", "d/huge-partial", "c/partial", "e/cpu"]
    assert "partly on the GPU" in partial.line() and partial.line().startswith("Q4_K_M, ")


def test_candidate_groups_leave_out_heads_projectors_and_incomplete_sets():
    groups = [
        _group("m-Q4_K_M.gguf", 5),
        _group("m-Q8_0.gguf", 9),
        _group("mmproj-F16.gguf", 1),
        FileGroup("mtp-m.gguf", [RemoteFile("mtp-m.gguf", 2, None, None)], None, True),
        FileGroup(
            "m-BF16-00001-of-00002.gguf",
            [RemoteFile("m-BF16-00001-of-00002.gguf", 20, None, None)],
            "BF16",
            False,
            expected_shards=2,
        ),
    ]
    assert [g.name for g in candidate_groups(groups)] == ["m-Q8_0.gguf", "m-Q4_K_M.gguf"]
    assert len(RECOMMENDED) >= 3 and all(r.count("/") == 1 and "MTP" in r for r in RECOMMENDED)


@pytest.fixture
def mtp_hub(fixtures, quantized, monkeypatch):
    q8 = quantized("partial", "Q8_0")
    h = FakeHub()
    h.add_repo(
        "acme/Tiny-MTP-GGUF",
        {
            "tiny-F32.gguf": fixtures["partial"].path,
            "tiny-Q8_0.gguf": q8.path,
            "mtp-tiny.gguf": fixtures["partial"].head,
        },
    )
    h.add_repo(
        "acme/Small-MTP-GGUF", {"small-Q8_0.gguf": quantized("eos", "Q8_0").path}
    )  # other bytes: the log tells them apart
    h.add_repo("acme/Trunk-GGUF", {"trunk-F32.gguf": fixtures["partial"].trunk})  # no MTP layers
    h.add_repo("acme/Head-GGUF", {"mtp-head.gguf": fixtures["partial"].head})
    with FakeHubServer(h):
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield h, {"F32": fixtures["partial"].path, "Q8_0": q8.path}


REPOS = ("acme/Trunk-GGUF", "acme/Small-MTP-GGUF", "acme/Missing-GGUF", "acme/Head-GGUF", "acme/Tiny-MTP-GGUF")


def _need(path) -> int:
    """Host bytes the local copy of a file needs at context 4096 with MTP."""
    f = fit_mod.assess(ModelShape.of_set(open_set(path)), 4096, [_host(64 * GiB)], mtp=True)
    return f.estimate.host_bytes


def test_recommend_keeps_the_largest_file_that_fits_per_repo(mtp_hub):
    hub, local = mtp_hub
    cfg = HubConfig.from_env()
    outcomes: dict[str, object] = {}
    recs = recommend(cfg, [_host(32 * GiB)], n_ctx=4096, repos=REPOS, report=outcomes.__setitem__)
    assert [(r.repo_id, r.group.name) for r in recs] == [
        ("acme/Tiny-MTP-GGUF", "tiny-F32.gguf"),
        ("acme/Small-MTP-GGUF", "small-Q8_0.gguf"),
    ]
    assert all(r.fit.verdict == "cpu" and r.fit.max_ctx == 4096 for r in recs)
    # the remote estimate is the local file's, to the byte
    assert recs[0].fit.estimate.host_bytes == _need(local["F32"])
    assert isinstance(outcomes["acme/Missing-GGUF"], RepoNotFound)
    assert outcomes["acme/Trunk-GGUF"] is None and outcomes["acme/Head-GGUF"] is None
    # largest first, and the first that fits ends the repo's search: the smaller file's
    # and the head's headers are never read
    assert hub.gets("tiny-Q8_0.gguf") == [] and hub.gets("mtp-tiny.gguf") == [] and hub.gets("mtp-head.gguf") == []
    assert all(g.range and g.range.startswith("bytes=0-") for g in hub.gets("tiny-F32.gguf"))


def test_recommend_falls_back_to_a_smaller_quantization_then_to_nothing(mtp_hub):
    _, local = mtp_hub
    cfg = HubConfig.from_env()
    q8, f32 = _need(local["Q8_0"]), _need(local["F32"])
    assert q8 < f32
    tight = _host(MARGIN_BYTES + (q8 + f32) // 2)
    recs = recommend(cfg, [tight], repos=("acme/Tiny-MTP-GGUF",))
    assert [r.group.name for r in recs] == ["tiny-Q8_0.gguf"]
    assert recommend(cfg, [_host(MARGIN_BYTES + q8 // 2)], repos=("acme/Tiny-MTP-GGUF",)) == []


def test_recommend_cancelled_raises_cancelled(mtp_hub):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        recommend(HubConfig.from_env(), [_host(32 * GiB)], repos=REPOS, cancel=cancel)


def test_a_file_that_is_not_gguf_does_not_hide_the_rest_of_its_repo(mtp_hub):
    hub, local = mtp_hub
    hub.add_repo(
        "acme/Mixed-MTP-GGUF", {"mixed-BF16.gguf": b"not a GGUF file " * 200_000, "mixed-Q8_0.gguf": local["Q8_0"]}
    )
    recs = recommend(HubConfig.from_env(), [_host(32 * GiB)], repos=("acme/Mixed-MTP-GGUF",))
    assert [r.group.name for r in recs] == ["mixed-Q8_0.gguf"]
    assert hub.gets("mixed-BF16.gguf")  # tried first (the larger file), found unreadable, passed over
