"""Multimodal projectors as files of the Hub and the library: listed beside the models,
chosen for a model as llama.cpp's ``-hf`` chooses, downloaded with it ("with vision", ``pull
--mmproj``) and paired by their headers; a projector that does not fit is refused in words.
Over real HTTP against the fake Hub, with tiny random projectors (tests.synth.projector)
and the bundled demo model (qwen35, 192 wide)."""

from __future__ import annotations

import json
import shutil

import pytest

from engine.errors import GGUFError, HubError, OfflineError, ProjectorMismatchError
from engine.hub.files import FileGroup, RemoteFile, group_gguf_files, projector_for, quant_bits
from engine.hub.library import EntryKind, Library
from engine.hub.projectors import read_remote_projector
from engine.hub.pull import pull
from engine.hub.recommended import candidate_groups
from engine.hub.remote import HubConfig, list_gguf
from engine.synth.demo import demo_model_path
from tests.engine.cli_helpers import mtp_studio
from tests.engine.hub.fakehub import FakeHub, FakeHubServer
from tests.synth.projector import write_projector

REPO = "unsloth/Tiny-MTP-GGUF"


def _groups(*names: str) -> list[FileGroup]:
    return group_gguf_files([RemoteFile(n, 10, None, None) for n in names])


def _pick(groups: list[FileGroup], model: str) -> str | None:
    chosen = projector_for(groups, next(g for g in groups if g.name == model))
    return chosen.name if chosen is not None else None


# ------------------------------------------------------------ the rule, by name
def test_the_projector_for_a_model_is_the_closest_quant_in_the_deepest_shared_folder():
    unsloth = _groups(
        "Qwen3.6-27B-Q4_K_M.gguf",
        "Qwen3.6-27B-Q8_0.gguf",
        "Qwen3.6-27B-BF16.gguf",
        "Qwen3.6-27B-F16.gguf",
        "Qwen3.6-27B-F32.gguf",
        "mmproj-BF16.gguf",
        "mmproj-F16.gguf",
        "mmproj-F32.gguf",
    )
    # 16 bits for 16-bit models (F16 before BF16 at equal distance), F32 for F32, else F16 > BF16 > F32
    assert _pick(unsloth, "Qwen3.6-27B-F16.gguf") == "mmproj-F16.gguf"
    assert _pick(unsloth, "Qwen3.6-27B-BF16.gguf") == "mmproj-F16.gguf"
    assert _pick(unsloth, "Qwen3.6-27B-F32.gguf") == "mmproj-F32.gguf"
    assert _pick(unsloth, "Qwen3.6-27B-Q4_K_M.gguf") == "mmproj-F16.gguf"
    assert _pick(unsloth, "Qwen3.6-27B-Q8_0.gguf") == "mmproj-F16.gguf"
    only_bf16 = _groups("m-Q4_K_M.gguf", "mmproj-BF16.gguf", "mmproj-F32.gguf")
    assert _pick(only_bf16, "m-Q4_K_M.gguf") == "mmproj-BF16.gguf"

    ggml_org = _groups("gemma-3-4b-it-Q8_0.gguf", "gemma-3-4b-it-f16.gguf", "mmproj-gemma-3-4b-it-Q8_0.gguf")
    assert _pick(ggml_org, "gemma-3-4b-it-Q8_0.gguf") == "mmproj-gemma-3-4b-it-Q8_0.gguf"  # the same bits

    folders = _groups(
        "UD-Q4_K_XL/M-UD-Q4_K_XL-00001-of-00002.gguf",
        "UD-Q4_K_XL/M-UD-Q4_K_XL-00002-of-00002.gguf",
        "UD-Q4_K_XL/mmproj-F32.gguf",
        "BF16/mmproj-BF16.gguf",
        "mmproj-F16.gguf",
        "M-Q8_0.gguf",
    )
    # the model's own folder wins over a closer quantization above it; another folder never counts
    assert _pick(folders, "UD-Q4_K_XL/M-UD-Q4_K_XL-00001-of-00002.gguf") == "UD-Q4_K_XL/mmproj-F32.gguf"
    assert _pick(folders, "M-Q8_0.gguf") == "mmproj-F16.gguf"
    assert _pick(_groups("m-Q8_0.gguf", "mtp-m-Q8_0.gguf"), "m-Q8_0.gguf") is None  # no projector in the repo
    assert _pick(unsloth, "mmproj-F16.gguf") is None  # a projector has none
    assert (quant_bits("m-UD-Q4_K_XL.gguf"), quant_bits("m-MXFP4.gguf"), quant_bits("model.gguf")) == (4, 4, 0)


def test_projectors_are_grouped_apart_from_models_and_heads():
    groups = _groups("m-Q8_0.gguf", "mtp-m.gguf", "mmproj-F16.gguf", "MTP/mmproj-audio-F16.gguf", "m-F16.gguf")
    assert [(g.name, g.projector, g.head) for g in groups] == [
        ("m-F16.gguf", False, False),
        ("m-Q8_0.gguf", False, False),
        ("MTP/mmproj-audio-F16.gguf", True, False),  # a projector even in a heads' folder
        ("mmproj-F16.gguf", True, False),
        ("mtp-m.gguf", False, True),
    ]
    assert [g.name for g in candidate_groups(groups)] == ["m-F16.gguf", "m-Q8_0.gguf"]


# ------------------------------------------------------------- over real HTTP
@pytest.fixture(scope="module")
def projectors(tmp_path_factory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("projectors")
    return {
        "F16": write_projector(d / "f16.gguf", "qwen3vl_merger", 192, seed=1).read_bytes(),
        "BF16": write_projector(d / "bf16.gguf", "qwen3vl_merger", 192, seed=2).read_bytes(),
        "F32": write_projector(d / "f32.gguf", "qwen3vl_merger", 192, seed=3).read_bytes(),
        "wide": write_projector(d / "wide.gguf", "qwen3vl_merger", 256, seed=4).read_bytes(),
        "gemma": write_projector(d / "gemma.gguf", "gemma4v", 192, seed=5).read_bytes(),
    }


@pytest.fixture
def vhub(projectors, monkeypatch):
    demo = demo_model_path()
    h = FakeHub()
    h.add_repo(
        REPO,
        {
            "Tiny-Q8_0.gguf": demo,
            "Tiny-F16.gguf": demo,
            "mmproj-BF16.gguf": projectors["BF16"],
            "mmproj-F16.gguf": projectors["F16"],
            "mmproj-F32.gguf": projectors["F32"],
        },
        downloads=50,
    )
    h.add_repo("acme/Wide-GGUF", {"Tiny-Q8_0.gguf": demo, "mmproj-Wide-F16.gguf": projectors["wide"]})
    h.add_repo("acme/Eyes-GGUF", {"mmproj-vision-gemma-F16.gguf": projectors["gemma"]})
    h.add_repo("acme/Plain-GGUF", {"Plain-Q8_0.gguf": demo})
    with FakeHubServer(h):
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield h


@pytest.fixture
def vcfg(vhub) -> HubConfig:
    return HubConfig.from_env()


def _partials(library: Library) -> list:
    return list(library.partial_dir.rglob("*.part")) if library.partial_dir.exists() else []


def test_the_listing_shows_projectors_beside_the_models_and_reads_their_headers(vcfg):
    rev, groups = list_gguf(vcfg, REPO)
    assert [(g.name, g.projector) for g in groups] == [
        ("Tiny-F16.gguf", False),
        ("Tiny-Q8_0.gguf", False),
        ("mmproj-BF16.gguf", True),
        ("mmproj-F16.gguf", True),
        ("mmproj-F32.gguf", True),
    ]
    assert projector_for(groups, groups[1]).name == "mmproj-F16.gguf"
    facts = read_remote_projector(vcfg, REPO, "mmproj-F16.gguf", rev)  # ranged requests, nothing downloaded
    assert (facts.projector_type, facts.modalities, facts.output_width) == ("qwen3vl_merger", ("vision",), 192)
    with pytest.raises(GGUFError, match="not a multimodal projector"):
        read_remote_projector(vcfg, REPO, "Tiny-Q8_0.gguf", rev)


def test_download_with_vision_fetches_both_and_the_library_pairs_them(vcfg, vhub, library):
    res = pull(vcfg, library, REPO, file="Tiny-Q8_0.gguf", mmproj=True)
    model, proj = res.model, res.projector
    assert proj is not None and proj.kind == EntryKind.PROJECTOR and proj.files == ["mmproj-F16.gguf"]
    assert model.projector == proj.id and library.projector_of(model) == proj
    assert library.projector_path(model).read_bytes() == vhub.repos[REPO].files["mmproj-F16.gguf"].data
    assert proj.facts.modalities == ("vision",) and proj.facts.output_width == 192
    assert proj.origin.repo == REPO and proj.name == "Tiny-MTP-mmproj-F16"
    # a projector alone is never a model to load
    assert [e.id for e in library.entries() if e.kind == EntryKind.MODEL] == [model.id]
    # another quantization of the same model reads with the projector already there
    res2 = pull(vcfg, library, REPO, file="Tiny-F16.gguf", mmproj=True)
    assert res2.projector.id == proj.id and res2.model.projector == proj.id
    assert sum(e.kind == EntryKind.PROJECTOR for e in library.entries()) == 1
    # the pairing survives a lost index (entry.json records) and a lost record (headers)
    (library.root / "library.json").unlink()
    assert Library(library.root).get(model.id).projector == proj.id
    (library.root / proj.id / "entry.json").unlink()
    again = Library(library.root)
    assert again.get(proj.id).kind == EntryKind.PROJECTOR and again.projector_of(again.get(model.id)) is not None
    # deleting the projector leaves the models text-only
    library.delete(proj.id)
    assert all(e.projector is None for e in library.entries())


def test_a_named_projector_is_the_one_fetched(vcfg, library):
    res = pull(vcfg, library, REPO, file="Tiny-Q8_0.gguf", mmproj="mmproj-BF16.gguf")
    assert res.projector.files == ["mmproj-BF16.gguf"] and res.model.projector == res.projector.id
    other = pull(vcfg, library, REPO, file="Tiny-F16.gguf", mmproj="acme/Eyes-GGUF:mmproj-vision-gemma-F16.gguf")
    assert other.projector.origin.repo == "acme/Eyes-GGUF" and other.model.projector == other.projector.id
    with pytest.raises(HubError, match=r"No file 'mmproj-Q2\.gguf'.*mmproj-BF16\.gguf"):
        pull(vcfg, library, REPO, file="Tiny-Q8_0.gguf", mmproj="mmproj-Q2.gguf")


def test_a_projector_that_does_not_fit_is_refused_before_any_download(vcfg, vhub, library):
    with pytest.raises(ProjectorMismatchError) as e:
        pull(vcfg, library, "acme/Wide-GGUF", file="Tiny-Q8_0.gguf", mmproj=True)
    assert "mmproj-Wide-F16.gguf makes 256-wide embeddings but Tiny-Q8_0.gguf takes 192" in str(e.value)
    assert "Nothing was downloaded" in str(e.value)
    assert library.entries() == [] and not _partials(library)
    # only header ranges were read of the model: none of its body beyond them
    assert all(g.range and g.range.startswith("bytes=0-") for g in vhub.gets("Tiny-Q8_0.gguf"))
    with pytest.raises(ProjectorMismatchError, match="not a multimodal projector"):
        pull(vcfg, library, REPO, file="Tiny-Q8_0.gguf", mmproj="Tiny-F16.gguf")
    with pytest.raises(HubError, match="is a multimodal projector, not a model"):
        pull(vcfg, library, REPO, file="mmproj-F16.gguf")
    with pytest.raises(HubError, match="acme/Plain-GGUF has no projector"):
        pull(vcfg, library, "acme/Plain-GGUF", mmproj=True)
    with pytest.raises(HubError, match="is a multimodal projector, not a model"):
        pull(vcfg, library, "acme/Eyes-GGUF", mmproj=True)


def test_the_library_refuses_a_pair_whose_widths_differ(vcfg, library, projectors, tmp_path):
    model = pull(vcfg, library, REPO, file="Tiny-Q8_0.gguf").model
    wide = tmp_path / "mmproj-wide.gguf"
    wide.write_bytes(projectors["wide"])
    proj = library.add([wide], name="wide", provenance={"source": "test"})
    assert proj.kind == EntryKind.PROJECTOR and proj.facts.output_width == 256
    with pytest.raises(ProjectorMismatchError, match="makes 256-wide embeddings but Tiny-Q8_0.gguf takes 192"):
        library.attach_projector(model.id, proj.id)
    with pytest.raises(ProjectorMismatchError, match="is not a multimodal projector"):
        library.attach_projector(proj.id, model.id)
    assert library.get(model.id).projector is None


def test_offline_a_pull_with_vision_is_answered_from_the_library(vcfg, library):
    first = pull(vcfg, library, REPO, file="Tiny-Q8_0.gguf", mmproj=True)
    off = HubConfig(vcfg.endpoint, offline=True)
    res = pull(off, library, REPO, file="Tiny-Q8_0.gguf", mmproj=True)
    assert res.already_local and res.projector.id == first.projector.id
    with pytest.raises(OfflineError, match="no projector of acme/Eyes-GGUF"):
        pull(off, library, REPO, file="Tiny-Q8_0.gguf", mmproj="acme/Eyes-GGUF:mmproj-vision-gemma-F16.gguf")


def test_cli_pull_mmproj(vhub, tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    out = json.loads(mtp_studio("search", "tiny-mtp", "--files", "--json", check=True).stdout)
    files = {f["name"]: f for f in out[0]["files"]}
    assert files["mmproj-F16.gguf"]["projector"] is True and files["mmproj-F16.gguf"]["fit"] is None
    res = json.loads(mtp_studio("pull", REPO, "Tiny-Q8_0.gguf", "--mmproj", "--json", check=True).stdout)
    assert res["projector"]["files"] == ["mmproj-F16.gguf"] and res["model"]["projector"] == res["projector"]["id"]
    p = mtp_studio("pull", REPO, "Tiny-F16.gguf", "--mmproj", "mmproj-F32.gguf", check=True)
    assert "reads images with it" in p.stdout and "mmproj-F32.gguf" in p.stdout
    text = mtp_studio("models", check=True).stdout
    assert "reads images with Tiny-MTP-mmproj-F16" in text and "a projector: reads images for its model" in text
    p = mtp_studio("pull", "acme/Wide-GGUF", "Tiny-Q8_0.gguf", "--mmproj")
    assert p.returncode == 1 and "makes 256-wide embeddings" in p.stderr and "Traceback" not in p.stderr
    p = mtp_studio("pull", REPO, "Tiny-Q8_0.gguf", "--quant", "Q8_0")
    assert p.returncode == 1 and "give one of them" in p.stderr
    models = json.loads(mtp_studio("models", "--json", check=True).stdout)["models"]
    assert sum(m["kind"] == "projector" for m in models) == 2
    shutil.rmtree(tmp_path / "home")
