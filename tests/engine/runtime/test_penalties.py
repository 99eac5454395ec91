"""Repetition penalties apply identically with and without MTP (each verify row penalised
by the output so far plus the drafts before it), and really change the output."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.decode.penalties import Penalties
from engine.runtime.decider import resolve
from engine.synth.demo import demo_model_path
from tests.engine.cli_helpers import mtp_json

CODE = 'import os\n\n\ndef list_files(path):\n    """Return the names of the files in path."""\n'


@pytest.mark.parametrize(
    "flags",
    [
        ["--presence-penalty", "1.5"],
        ["--frequency-penalty", "0.8"],
        ["--repeat-penalty", "1.8"],
        ["--presence-penalty", "0.5", "--frequency-penalty", "0.5", "--repeat-penalty", "1.3"],
    ],
    ids=["presence", "frequency", "repeat", "all"],
)
def test_penalties_are_identical_with_and_without_mtp(flags, tmp_path, monkeypatch):
    """On the trained demo (which repeats itself in code) in exact mode: the penalised
    output differs from the unpenalised one and is the same with MTP at depths 1, 3 and
    auto as without it, bit for bit."""
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))  # auto learns in a home of its own
    common = ["generate", "--model", str(demo_model_path()), "--prompt", CODE, "--max-tokens", "64", "--exact"]
    none = mtp_json(*common, "--mtp", "off")
    plain = mtp_json(*common, "--mtp", "off", *flags)
    assert plain["tokens"] != none["tokens"]  # the penalty really acts
    for depth in ("1", "3", "auto"):
        g = mtp_json(*common, "--draft-depth", depth, *flags)
        assert g["tokens"] == plain["tokens"] and g["stats"]["drafted"] > 0, depth
    sampled = mtp_json(*common, "--mtp", "off", "--temperature", "0.9", "--seed", "7", *flags)
    assert (
        mtp_json(*common, "--draft-depth", "2", "--temperature", "0.9", "--seed", "7", *flags)["tokens"]
        == sampled["tokens"]
    )


def test_the_rule_is_llama_cpps_and_openais():
    logits = np.array([2.0, -2.0, 1.0, 0.5], np.float32)
    out = Penalties(presence=0.5, frequency=0.25, repeat=2.0).apply(logits, Counter({0: 2, 1: 1}))
    assert out.tolist() == [2.0 / 2 - 0.5 - 0.5, -2.0 * 2 - 0.25 - 0.5, 1.0, 0.5]
    assert logits.tolist() == [2.0, -2.0, 1.0, 0.5]  # the row itself is untouched


@pytest.mark.parametrize("field,value", [("presence_penalty", 2.5), ("frequency_penalty", -3), ("repeat_penalty", 0)])
def test_out_of_range_penalties_name_their_field(field, value):
    with pytest.raises(InvalidRequestError) as err:
        resolve(J.Generate(prompt="x", **{field: value}))
    assert err.value.param == field
