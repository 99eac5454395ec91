"""One pairing rule for every caller: the same head gets the same verdict from compose
(and the GUI's compatibility line, which runs compose's check), the loader, and pull's
check on remote header summaries."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.errors import ComposeError, HeadMismatchError
from engine.gguf.compose import check_compatible
from engine.gguf.pairing import HeaderFacts, PairingError, Summary, check_pair, unknown_nextn_tensors
from engine.gguf.shards import open_set
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.qwen35 import build_model
from tests.engine.gguf.craft import edit
from tests.models import RECIPES


def _verdicts(target, head) -> dict[str, str]:
    """The error code each caller gives, or "ok"."""
    out = {}
    try:
        check_compatible(open_set(target), open_set(head))
        out["compose"] = "ok"
    except ComposeError as e:
        out["compose"] = e.code
    try:
        lm = load(LoadSpec(target, head=head, mtp=MtpSource.EXTERNAL, n_ctx=256, probe=False))
        lm.close()
        out["loader"] = "ok"
    except HeadMismatchError as e:
        out["loader"] = e.code
    from engine.gguf.reader import read_header

    def remote(p):  # what read_remote_header summarizes from the first bytes of the file
        h = read_header(p)
        arch = h.architecture
        return Summary.of_remote(
            p.name,
            HeaderFacts(
                architecture=arch,
                embedding_length=h.get(f"{arch}.embedding_length"),
                vocab_size=h.kvs["tokenizer.ggml.tokens"].count,
                block_count=h.get(f"{arch}.block_count"),
                nextn_layers=h.get(f"{arch}.nextn_predict_layers") or 0,
                tensor_names=tuple(t.name for t in h.tensors),
            ),
        )

    try:
        check_pair(remote(target), remote(head))
        out["pull"] = "ok"
    except PairingError as e:
        out["pull"] = e.code
    return out


def test_a_head_that_fits_passes_every_caller(fixtures):
    fx = fixtures["partial"]
    assert _verdicts(fx.trunk, fx.head) == {"compose": "ok", "loader": "ok", "pull": "ok"}


def test_a_stray_tensor_in_the_nextn_block_is_rejected_by_name_everywhere(fixtures, tmp_path):
    fx = fixtures["partial"]
    stray = edit(fx.head, tmp_path / "mtp-stray.gguf", add_tensor=("blk.4.ffn_norm.weight", (128,)))
    assert _verdicts(fx.trunk, stray) == {
        "compose": "unknown_tensor",
        "loader": "unknown_tensor",
        "pull": "unknown_tensor",
    }
    with pytest.raises(PairingError, match=r"blk\.4\.ffn_norm\.weight"):
        check_pair(Summary.of_set(open_set(fx.trunk)), Summary.of_set(open_set(stray)))


@pytest.mark.parametrize(
    "change,code",
    [
        (dict(n_embd=64, head_dim=16), "hidden_size_mismatch"),
        (dict(n_merges=170), "vocab_mismatch"),
    ],
)
def test_mismatched_heads_get_the_same_code_everywhere(fixtures, tmp_path, change, code):
    build_model(replace(RECIPES["partial"], **change), tmp_path / "o.gguf", head_path=tmp_path / "mtp-o.gguf")
    assert set(_verdicts(fixtures["partial"].trunk, tmp_path / "mtp-o.gguf").values()) == {code}


def test_a_model_without_nextn_is_not_a_head_anywhere(fixtures):
    assert set(_verdicts(fixtures["partial"].trunk, fixtures["full"].trunk).values()) == {"head_without_nextn"}


def test_same_size_other_tokens_is_caught_where_tokens_are_known(fixtures, tmp_path):
    """A remote summary knows the vocabulary's size only; local files compare the tokens."""
    from engine.gguf.constants import ValueType as V
    from engine.gguf.reader import read_header
    from tests.engine.gguf.craft import kv

    fx = fixtures["partial"]
    tokens = list(read_header(fx.head).get("tokenizer.ggml.tokens"))
    tokens[300], tokens[301] = tokens[301], tokens[300]
    other = edit(
        fx.head,
        tmp_path / "mtp-tok.gguf",
        set_kvs={"tokenizer.ggml.tokens": kv("tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING)},
    )
    with pytest.raises(PairingError) as e:
        check_pair(Summary.of_set(open_set(fx.trunk)), Summary.of_set(open_set(other)))
    assert e.value.code == "tokenizer_mismatch"


def test_every_tensor_of_a_real_nextn_block_is_known(fixtures):
    head = Summary.of_set(open_set(fixtures["partial"].head))
    assert head.tensor_names and unknown_nextn_tensors("qwen35", head) == []
