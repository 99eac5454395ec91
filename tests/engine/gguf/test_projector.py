"""Multimodal projectors (``mmproj-*.gguf``) read from their headers
(:mod:`engine.gguf.projector`): the facts of the tiny fixtures of both family types
(:mod:`tests.synth.projector`), their fit with a text model, the refusals in words, the
``inspect`` / ``validate`` commands — and, in a child process, that the real libmtmd loads
each fixture with its model and encodes images as the header facts predict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main as cli
from engine.errors import GGUFError, ModelNotFoundError
from engine.gguf.constants import ValueType
from engine.gguf.projector import is_projector, n_embd_inp, pair_problem, read_projector
from engine.gguf.reader import read_header
from engine.gguf.shards import open_set
from engine.gguf.validate import validate_set
from tests.engine.gguf.craft import edit, kv
from tests.synth.projector import write_projector

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "resources" / "demo.gguf"  # qwen35: 192 wide, IMROPE (M-RoPE)
ENV = {**os.environ, "GGML_NO_BACKTRACE": "1"}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Both projector fixtures and their text models: the demo (qwen35, 192) and a tiny
    Gemma 4 (128, written by llama.cpp's layout in a child process)."""
    out = tmp_path_factory.mktemp("projectors")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.synth.families", str(out / "gemma4"), "gemma4"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    gemma4 = Path(json.loads(proc.stdout)["gemma4"]["target"])
    return {
        "qwen": write_projector(out / "mmproj-qwen.gguf", "qwen3vl_merger", 192),
        "gemma": write_projector(out / "mmproj-gemma.gguf", "gemma4v", 128),
        "qwen_model": DEMO,
        "gemma_model": gemma4,
    }


def _refused(path: Path, code: str) -> GGUFError:
    with pytest.raises(GGUFError) as e:
        read_projector(path)
    assert e.value.code == code, str(e.value)
    assert e.value.file == str(path)
    return e.value


# ---------------------------------------------------------------------------- facts
def test_the_facts_of_a_qwen3vl_merger_projector(files):
    f = read_projector(files["qwen"])
    assert (f.projector_type, f.audio_projector_type, f.vision, f.audio) == ("qwen3vl_merger", None, True, False)
    assert f.modalities == ("vision",)
    assert (f.output_width, f.image_size, f.patch_size) == (192, 64, 8)
    assert f.to_json()["modalities"] == ["vision"] and f.to_json()["path"] == str(files["qwen"])
    assert is_projector(files["qwen"]) and not is_projector(DEMO) and not is_projector(files["qwen"].parent / "no")


def test_the_facts_of_a_gemma4v_projector(files):
    f = read_projector(files["gemma"])
    assert (f.projector_type, f.modalities, f.output_width, f.image_size, f.patch_size) == (
        "gemma4v",
        ("vision",),
        128,
        64,
        8,
    )


def test_deepstack_layers_widen_a_qwen3vl_merger_output(tmp_path):
    """clip.cpp: mm.2's width × (1 + deepstack layers), as Qwen3-VL's text models take it."""
    p = write_projector(tmp_path / "mmproj-ds.gguf", "qwen3vl_merger", 3 * 64, deepstack=2)
    assert read_header(p).tensor_map["mm.2.bias"].dims == (64,)
    assert read_projector(p).output_width == 192


def _audio_keys(projection: int = 128) -> dict[str, bytes]:
    keys = {
        "clip.has_audio_encoder": kv("clip.has_audio_encoder", ValueType.BOOL, True),
        "clip.audio.projector_type": kv("clip.audio.projector_type", ValueType.STRING, "gemma4a"),
        "clip.audio.num_mel_bins": kv("clip.audio.num_mel_bins", ValueType.UINT32, 128),
        "clip.audio.attention.layer_norm_epsilon": kv(
            "clip.audio.attention.layer_norm_epsilon", ValueType.FLOAT32, 1e-6
        ),
    }
    for key, value in (
        ("embedding_length", 32),
        ("attention.head_count", 2),
        ("feed_forward_length", 64),
        ("block_count", 1),
        ("projection_dim", projection),
    ):
        keys[f"clip.audio.{key}"] = kv(f"clip.audio.{key}", ValueType.UINT32, value)
    return keys


def test_a_projector_with_an_audio_encoder_reads_both(files, tmp_path):
    p = edit(
        files["gemma"],
        tmp_path / "mmproj-av.gguf",
        set_kvs=_audio_keys(),
        add_tensor=("mm.a.input_projection.weight", (32, 128)),
    )
    f = read_projector(p)
    assert (f.modalities, f.projector_type, f.audio_projector_type, f.output_width) == (
        ("vision", "audio"),
        "gemma4v",
        "gemma4a",
        128,
    )


def test_encoders_of_two_widths_are_refused(files, tmp_path):
    p = edit(
        files["gemma"],
        tmp_path / "mmproj-2w.gguf",
        set_kvs=_audio_keys(96),
        add_tensor=("mm.a.input_projection.weight", (32, 96)),
    )
    assert "128-wide" in str(_refused(p, "width_mismatch"))


# ------------------------------------------------------------------------- pairing
def test_each_projector_fits_its_own_model(files):
    assert pair_problem(files["qwen_model"], files["qwen"]) is None
    assert pair_problem(files["gemma_model"], files["gemma"]) is None
    assert n_embd_inp(read_header(DEMO)) == 192


def test_a_projector_of_another_width_is_refused_in_words(files):
    problem = pair_problem(DEMO, files["gemma"])
    assert problem == (
        "mmproj-gemma.gguf makes 128-wide embeddings but demo.gguf takes 192: download the projector made for demo.gguf"
    )
    assert "192-wide" in pair_problem(files["gemma_model"], files["qwen"])


def test_files_in_the_wrong_places_are_named(files):
    assert "demo.gguf is a text model (qwen35), not a multimodal projector" in pair_problem(DEMO, DEMO)
    assert "is a projector, not a text model" in pair_problem(files["qwen"], files["qwen"])
    assert "not found" in pair_problem(DEMO, files["qwen"].with_name("mmproj-missing.gguf"))


def test_the_input_width_follows_llama_cpps_n_embd_inp(tmp_path, files):
    """Qwen3-VL text models take (1 + deepstack layers) × embedding_length; a Gemma 4
    assistant its target's width."""
    arch = kv("general.architecture", ValueType.STRING, "qwen3vl")
    ds = {
        "general.architecture": arch,
        "qwen3vl.embedding_length": kv("qwen3vl.embedding_length", ValueType.UINT32, 64),
        "qwen3vl.n_deepstack_layers": kv("qwen3vl.n_deepstack_layers", ValueType.UINT32, 2),
    }
    assert n_embd_inp(read_header(edit(DEMO, tmp_path / "qwen3vl.gguf", set_kvs=ds))) == 192
    asst = files["gemma_model"].with_name("gemma4-assistant.gguf")
    assert n_embd_inp(read_header(asst)) == 128


# ------------------------------------------------------------------------ refusals
def test_a_text_model_given_as_a_projector_is_refused(files):
    e = _refused(DEMO, "not_a_projector")
    assert str(e).startswith("demo.gguf is a text model (qwen35), not a multimodal projector (mmproj-*.gguf)")


def test_a_projector_given_as_a_model_is_refused_in_one_sentence(files):
    report, _ = validate_set(open_set(files["qwen"]))
    assert [p.code for p in report.errors] == ["projector_not_model"]
    assert "multimodal projector (mmproj), not a text model" in report.errors[0].message


def test_a_truncated_projector_is_refused(files, tmp_path):
    raw = files["qwen"].read_bytes()
    cut = tmp_path / "mmproj-cut.gguf"
    cut.write_bytes(raw[: len(raw) // 2])
    assert "is truncated: its tensors end at byte" in str(_refused(cut, "truncated"))
    head = tmp_path / "mmproj-head.gguf"
    head.write_bytes(raw[:1000])  # inside the header
    assert "cannot be read as a GGUF projector: file is truncated" in str(_refused(head, "truncated"))


def test_other_files_are_refused(files, tmp_path):
    junk = tmp_path / "mmproj-junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    assert "not a GGUF file" in str(_refused(junk, "bad_magic"))
    with pytest.raises(ModelNotFoundError, match="Projector not found"):
        read_projector(tmp_path / "mmproj-none.gguf")


@pytest.mark.parametrize(
    "edits, code, words",
    [
        ({"drop": ("clip.has_vision_encoder",)}, "no_encoder", "has no image or audio encoder"),
        ({"drop": ("clip.projector_type",)}, "missing_projector_type", "but no projector type"),
        (
            {"set": {"clip.projector_type": kv("clip.projector_type", ValueType.STRING, "frobnicator")}},
            "unknown_projector_type",
            "a 'frobnicator' projector",
        ),
        (
            {"set": {"clip.vision.image_size": kv("clip.vision.image_size", ValueType.INT32, 64)}},
            "bad_key_type",
            "clip.vision.image_size must be uint32, found int32: llama.cpp would abort",
        ),
        ({"drop": ("clip.vision.patch_size",)}, "missing_key", "clip.vision.patch_size is missing"),
        ({"rename": {"mm.2.bias": "mm.9.bias"}}, "missing_tensor", "lacks tensor mm.2.bias"),
    ],
)
def test_broken_projectors_are_refused_in_words(files, tmp_path, edits, code, words):
    p = edit(
        files["qwen"],
        tmp_path / "mmproj-bad.gguf",
        set_kvs=edits.get("set"),
        drop_kvs=edits.get("drop", ()),
        rename=edits.get("rename"),
    )
    assert words in str(_refused(p, code))


# ----------------------------------------------------------------------------- CLI
def test_validate_and_inspect_recognise_a_projector(files, capsys):
    assert cli(["validate", str(files["qwen"])]) == 0
    assert "qwen3vl_merger projector reading vision, 192-wide embeddings" in capsys.readouterr().out
    assert cli(["inspect", str(files["gemma"]), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["kind"], s["projector_type"], s["output_width"], s["modalities"]) == (
        "projector",
        "gemma4v",
        128,
        ["vision"],
    )
    assert cli(["inspect", str(files["qwen"])]) == 0
    assert "output width  192" in capsys.readouterr().out


def test_validate_checks_a_model_with_its_projector(files, capsys):
    assert cli(["validate", str(DEMO), "--mmproj", str(files["qwen"])]) == 0
    assert "projector: " in capsys.readouterr().out
    assert cli(["validate", str(DEMO), "--mmproj", str(files["gemma"]), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [e["code"] for e in out["errors"]] == ["projector_mismatch"]
    assert out["projector"]["output_width"] == 128


def test_validate_refuses_a_broken_projector(files, tmp_path, capsys):
    raw = files["gemma"].read_bytes()
    cut = tmp_path / "mmproj-cut.gguf"
    cut.write_bytes(raw[: len(raw) - 1000])
    assert cli(["validate", str(cut), "--json"]) == 1
    assert "data_out_of_bounds" in {e["code"] for e in json.loads(capsys.readouterr().out)["errors"]}
    assert cli(["validate", str(DEMO), "--mmproj", str(DEMO)]) == 1
    assert "not_a_projector" in capsys.readouterr().out


# ---------------------------------------------------------------- the real libmtmd
def _probe(mmproj: Path, model: Path, *images: str) -> dict:
    """libmtmd in a child: an abort fails the test instead of killing pytest."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.synth.projector", str(mmproj), str(model), *images],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"libmtmd child exited {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_libmtmd_encodes_a_qwen3vl_merger_fixture_with_m_rope(files):
    """64×48 px at 8 px patches merged 2×2: 4×3 tokens, 4 positions (M-RoPE: max(nx, ny))."""
    r = _probe(files["qwen"], DEMO, "64x48:1", "64x48:2", "64x48:1")
    assert r["ok"], r
    assert (r["n_embd_inp"], r["mrope"], r["non_causal"], r["vision"], r["audio"]) == (192, True, False, True, False)
    for img in r["images"]:
        assert (img["n_tokens"], img["nx"], img["ny"], img["n_pos"]) == (12, 4, 3, 4)
        assert img["chunk_types"] == [0, 1, 0] and img["embd_finite"] and img["embd_std"] > 0
    a, b, again = (img["embd_sha256"] for img in r["images"])
    assert a != b and a == again


def test_libmtmd_reads_a_jpeg(files):
    pytest.importorskip("PIL", reason="tests.synth.images writes JPEGs with Pillow (the plot extra)")
    r = _probe(files["qwen"], DEMO, "jpeg:64x48:1")
    assert r["ok"], r
    assert (r["images"][0]["bitmap"], r["images"][0]["n_tokens"]) == ([64, 48], 12)


def test_libmtmd_encodes_a_gemma4v_fixture_non_causally(files):
    """gemma4v asks for at least 70 tokens: 64×48 px is scaled up to 160×128 px, 10×8
    tokens of 16 px (8 px patches pooled 2×2); positions are consecutive."""
    r = _probe(files["gemma"], files["gemma_model"], "64x48:1", "64x48:2")
    assert r["ok"], r
    assert (r["n_embd_inp"], r["mrope"], r["non_causal"]) == (128, False, True)
    for img in r["images"]:
        assert (img["n_tokens"], img["nx"], img["ny"], img["n_pos"]) == (80, 80, 1, 80)
        assert img["embd_finite"]
    assert r["images"][0]["embd_sha256"] != r["images"][1]["embd_sha256"]


def test_libmtmd_agrees_with_the_header_checks(files):
    """A pair refused by :func:`pair_problem` is refused by libmtmd too, and broken
    images fail to decode without taking the process down."""
    assert pair_problem(DEMO, files["gemma"]) is not None
    r = _probe(files["gemma"], DEMO)
    assert (r["ok"], r["stage"]) == (False, "init")
    r = _probe(files["qwen"], DEMO, "truncated", "corrupt")
    assert [img.get("stage") for img in r["images"]] == ["bitmap", "bitmap"]
