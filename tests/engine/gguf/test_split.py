"""``mtp-studio split``: a GGUF becomes a shard set that validates, holds every tensor's
bytes unchanged and that llama.cpp loads to the same logits; limits are kept, nothing is
overwritten by accident and a cancelled split leaves nothing behind."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from engine.errors import Cancelled, ComposeError
from engine.gguf.compose import sha256_of_tensor
from engine.gguf.reader import read_header
from engine.gguf.shards import open_set
from engine.gguf.split import shard_groups, split_model
from engine.gguf.validate import validate_path
from tests.engine.cli_helpers import mtp_studio

PROMPT = "The quick brown fox"


def _last_logits(path, tokens=None) -> tuple[list[int], np.ndarray]:
    from engine.runtime.llama.batch import Batch
    from engine.runtime.llama.context import Context
    from engine.runtime.llama.model import Model

    model = Model.load(path, load_mtp=True)
    ctx = batch = None
    try:
        tokens = tokens or model.prompt_tokens(PROMPT)
        ctx = Context(model, n_ctx=64, n_threads=1)
        batch = Batch(len(tokens))
        batch.set(tokens, 0)
        ctx.decode(batch)
        return tokens, ctx.logits(-1).copy()
    finally:
        for o in (batch, ctx, model):
            if o is not None:
                o.close()


def test_split_cli_writes_a_valid_set_that_loads_like_the_original(fixtures, tmp_path):
    src = fixtures["full"].path
    out = mtp_studio("split", str(src), "--out", str(tmp_path / "m.gguf"), "--shards", "3", "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    shards = [tmp_path / f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]  # the trailing .gguf is dropped
    assert body["ok"] and body["outputs"] == [str(p) for p in shards] and body["validation"]["valid"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in shards]  # no temp files left

    report, facts, ms = validate_path(shards[0])
    assert report.valid and facts.kind == "integrated" and ms.paths == shards
    original = read_header(src)
    assert [len(h.tensors) for h in ms.headers] == [24, 24, 23] == [len(g) for g in shard_groups(original.tensors, 3)]
    assert ms.first.get("split.count") == 3 and ms.first.get("split.tensors.count") == len(original.tensors)
    assert [h.get("split.no") for h in ms.headers] == [0, 1, 2]
    kept = {kv.key: kv.raw for kv in original.kv_list}
    assert {kv.key: kv.raw for kv in ms.first.kv_list if not kv.key.startswith("split.")} == kept
    by_name = {t.name: t for t in original.tensors}
    for h, t in ms.all_tensors():
        o = by_name.pop(t.name)
        assert (t.dims, t.type) == (o.dims, o.type)
        assert sha256_of_tensor(h.path, h, t) == sha256_of_tensor(original.path, original, o)
    assert by_name == {}  # every tensor, once

    tokens, want = _last_logits(src)
    _, got = _last_logits(shards[0], tokens)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("option,value", [("--max-tensors", "10"), ("--max-size", "300K")])
def test_split_limits_are_kept(fixtures, tmp_path, option, value):
    src = fixtures["partial"].path
    proc = mtp_studio("split", str(src), "--out", str(tmp_path / "s"), option, value, "--json")
    assert proc.returncode == 0, proc.stderr
    outs = json.loads(proc.stdout)["outputs"]
    ms = open_set(outs[0])
    assert len(ms.headers) == len(outs) > 2 and validate_path(outs[0])[0].valid
    for h in ms.headers:
        if option == "--max-tensors":
            assert 1 <= len(h.tensors) <= 10
        else:
            data = sum(t.nbytes for t in h.tensors)
            assert h.tensors and (data <= 300_000 or len(h.tensors) == 1)
    assert [t.name for _, t in ms.all_tensors()] == [t.name for t in read_header(src).tensors]  # file order


def test_split_refuses_what_it_must_not_do(fixtures, tmp_path):
    src = fixtures["full"].path
    args = ("split", str(src), "--out", str(tmp_path / "x"), "--shards", "2")
    assert mtp_studio(*args).returncode == 0
    again = mtp_studio(*args)
    assert again.returncode == 1 and "already exists (pass --force" in again.stderr
    assert mtp_studio(*args, "--force").returncode == 0
    shard = mtp_studio("split", str(tmp_path / "x-00001-of-00002.gguf"), "--out", str(tmp_path / "y"), "--shards", "2")
    assert shard.returncode == 1 and "already a shard" in shard.stderr
    many = mtp_studio("split", str(src), "--out", str(tmp_path / "z"), "--shards", "1000", "--json")
    assert many.returncode == 1 and json.loads(many.stdout)["error"]["code"] == "bad_split"
    for usage in (
        ["--out", str(tmp_path / "u")],
        ["--out", str(tmp_path / "u"), "--max-size", "lots"],
        ["--out", str(tmp_path / "u"), "--shards", "2", "--max-tensors", "3"],
    ):
        assert mtp_studio("split", str(src), *usage).returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-00001-of-00002.gguf", "x-00002-of-00002.gguf"]


def test_a_cancelled_split_leaves_nothing(fixtures, tmp_path):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        split_model(fixtures["full"].path, 2, tmp_path / "c", cancel=cancel)
    assert list(tmp_path.iterdir()) == []
    named_like_a_shard = tmp_path / "a-00001-of-00001.gguf"  # not a shard: no split.* keys
    named_like_a_shard.write_bytes(fixtures["full"].path.read_bytes())
    with pytest.raises(ComposeError, match="is one of the inputs"):
        split_model(named_like_a_shard, 1, tmp_path / "a", overwrite=True)
    assert named_like_a_shard.read_bytes() == fixtures["full"].path.read_bytes()
