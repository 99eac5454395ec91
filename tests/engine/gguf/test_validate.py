"""Every structural check, per file and per shard set, with a clear code and message."""

from __future__ import annotations

import json


from engine.gguf.constants import TensorType, ValueType
from engine.gguf.split import split_model
from engine.gguf.validate import validate_path
from tests.engine.cli_helpers import mtp_studio
from tests.engine.gguf.craft import edit, kv, write_raw

V = ValueType
ARCH = kv("general.architecture", V.STRING, "llama")


def codes(path) -> set[str]:
    report, _, _ = validate_path(path)
    return {e.code for e in report.errors}


def test_valid_files_and_sets(fixtures, tmp_path):
    for fx in fixtures.values():
        for p in (fx.path, fx.trunk, fx.head):
            assert codes(p) == set(), p
    shards = split_model(fixtures["partial"].path, 3, tmp_path / "p")
    report, facts, ms = validate_path(shards[0])
    assert report.valid and len(ms.headers) == 3 and facts.nextn_layers == 1 and facts.kind == "integrated"


def test_misaligned_offset(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH], [("w", (8,), 0, 0), ("b", (8,), 0, 40)], bytes(128))
    assert "bad_offset" in codes(p)


def test_overlapping_offsets(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH], [("w", (16,), 0, 0), ("b", (8,), 0, 32)], bytes(128))
    assert "bad_offset" in codes(p)


def test_data_past_the_end(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH], [("w", (64,), 0, 0)], bytes(100))
    assert "data_out_of_bounds" in codes(p)


def test_duplicate_keys_and_tensors(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH, ARCH], [("w", (8,), 0, 0), ("w", (8,), 0, 32)], bytes(64))
    assert {"duplicate_key", "duplicate_tensor"} <= codes(p)


def test_alignment_not_a_power_of_two(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH, kv("general.alignment", V.UINT32, 48)], [("w", (8,), 0, 0)], bytes(64))
    assert "bad_alignment" in codes(p)


def test_invalid_tensor_type_and_block_size(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH], [("w", (8,), 77, 0)], bytes(64))
    assert "bad_tensor_type" in codes(p)
    # Q4_K has blocks of 256 elements: a first dimension of 100 is impossible
    p = write_raw(tmp_path / "b.gguf", [ARCH], [("w", (100, 2), int(TensorType.Q4_K), 0)], bytes(1024))
    report, _, _ = validate_path(p)
    assert "bad_block_size" in {e.code for e in report.errors}
    assert "multiple of Q4_K's block size 256" in report.errors[0].message


def test_long_names_and_too_many_dims(tmp_path):
    p = write_raw(tmp_path / "a.gguf", [ARCH], [("x" * 64, (8,), 0, 0), ("y", (1, 1, 1, 1, 8), 0, 32)], bytes(64))
    assert {"name_too_long", "bad_dims"} <= codes(p)


def test_strict_key_types_and_per_layer_arrays(fixtures, tmp_path):
    src = fixtures["partial"].path
    p = edit(src, tmp_path / "a.gguf", set_kvs={"qwen35.block_count": kv("qwen35.block_count", V.INT32, 5)})
    assert "bad_key_type" in codes(p)
    p = edit(src, tmp_path / "b.gguf", set_kvs={"qwen35.block_count": kv("qwen35.block_count", V.UINT32, 6)})
    assert "bad_array_length" in codes(p)  # recurrent_layers still has 5 entries
    # two NextN layers declared, one block of NextN tensors: block 3 is a trunk block without them
    p = edit(
        src,
        tmp_path / "c.gguf",
        set_kvs={"qwen35.nextn_predict_layers": kv("qwen35.nextn_predict_layers", V.UINT32, 2)},
    )
    assert "missing_nextn_tensors" in codes(p)


def test_shard_set_problems(fixtures, tmp_path):
    shards = split_model(fixtures["partial"].path, 3, tmp_path / "s")
    # missing shard
    moved = shards[1].with_suffix(".bak")
    shards[1].rename(moved)
    assert "missing_shard" in codes(shards[0])
    moved.rename(shards[1])
    # extra shard with the same prefix
    extra = tmp_path / "s-00004-of-00004.gguf"
    extra.write_bytes(shards[2].read_bytes())
    assert "extra_shard" in codes(shards[0])
    extra.unlink()
    # wrong split.no
    bad = edit(shards[1], tmp_path / "t.gguf", set_kvs={"split.no": kv("split.no", V.UINT16, 2)})
    bad.replace(shards[1])
    assert "bad_split_no" in codes(shards[0])


def test_wrong_split_tensors_count(fixtures, tmp_path):
    shards = split_model(fixtures["partial"].path, 2, tmp_path / "s")
    bad = edit(shards[0], tmp_path / "t.gguf", set_kvs={"split.tensors.count": kv("split.tensors.count", V.INT32, 7)})
    bad.replace(shards[0])
    report, _, _ = validate_path(shards[0])
    assert "bad_split_tensor_count" in {e.code for e in report.errors}
    assert any("7 but the shards hold" in e.message for e in report.errors)


def test_opening_a_later_shard_says_which_to_open(fixtures, tmp_path):
    shards = split_model(fixtures["partial"].path, 2, tmp_path / "s")
    report, _, _ = validate_path(shards[1])
    assert report.errors[0].code == "not_first_shard" and "s-00001-of-00002.gguf" in report.errors[0].message


def test_validate_cli_exit_codes_and_json(fixtures, tmp_path):
    ok = mtp_studio("validate", str(fixtures["full"].path), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["valid"] is True
    bad = write_raw(tmp_path / "a.gguf", [ARCH], [("w", (8,), 0, 3)], bytes(64))
    out = mtp_studio("validate", str(bad), "--json")
    body = json.loads(out.stdout)
    assert out.returncode == 1 and body["valid"] is False
    assert body["errors"][0]["code"] == "bad_offset" and body["errors"][0]["file"] == str(bad)
    assert "tensor 'w'" in body["errors"][0]["message"]
    assert mtp_studio("validate").returncode == 2


def test_validate_probe_reports_acceptance(fixtures):
    out = mtp_studio("validate", str(fixtures["full"].path), "--probe", "--json")
    body = json.loads(out.stdout)
    assert out.returncode == 0 and body["mtp"]["probe"]["ok"] and body["mtp"]["probe"]["acceptance"] == 1.0
    out = mtp_studio(
        "validate", str(fixtures["partial"].trunk), "--head", str(fixtures["partial"].head), "--probe", "--json"
    )
    body = json.loads(out.stdout)
    assert out.returncode == 0 and 0 < body["mtp"]["probe"]["acceptance"] < 1


def test_inspect_cli(fixtures, tmp_path):
    out = mtp_studio("inspect", str(fixtures["full"].head), "--json")
    s = json.loads(out.stdout)
    assert s["mtp"] == {"has_mtp": True, "kind": "head-only", "arch_supported": True}
    assert s["architecture"] == "qwen35" and s["tokenizer"]["vocab_size"] == 439 and s["block_count"] == 5
    shards = split_model(fixtures["full"].path, 3, tmp_path / "i")
    s = json.loads(mtp_studio("inspect", str(shards[0]), "--json").stdout)
    assert len(s["shards"]) == 3 and s["mtp"]["kind"] == "integrated" and s["parameters"] > 0
    text = mtp_studio("inspect", str(fixtures["full"].path)).stdout
    assert "MTP           yes, integrated (1 NextN layer(s))" in text
