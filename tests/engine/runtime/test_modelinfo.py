"""ModelInfo: what a load made of a model, as every other layer reads it."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from engine.runtime.modelinfo import EMBEDDING, ModelInfo

FITTED = ModelInfo(
    name="m",
    path="/models/m.gguf",
    n_ctx=2048,
    n_ctx_requested=4096,
    n_ctx_train=32768,
    tool_format="hermes",
    thinks=True,
    fallbacks=("repacking off",),
    rpc=("10.0.0.2:50052",),
    fit={"label": "fits in host memory", "max_ctx": 2048},
    memory={"total_bytes": 123, "offloaded_bytes": 45},
)


def test_it_crosses_json_and_a_process_boundary_whole():
    """to_json/from_json and pickle (a worker process sends its own) give back an equal
    value; an older writer's extra keys are ignored."""
    assert ModelInfo.from_json(FITTED.to_json()) == FITTED
    assert ModelInfo.from_json(dict(FITTED.to_json(), retired_key=1)) == FITTED
    assert pickle.loads(pickle.dumps(FITTED)) == FITTED
    assert FITTED.to_json()["fallbacks"] == ["repacking off"]  # JSON lists, not tuples


def test_it_cannot_be_changed_by_a_reader():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FITTED.n_ctx = 1  # type: ignore[misc]


def test_the_reports_figures_are_read_through_properties():
    assert (FITTED.memory_bytes, FITTED.offloaded_bytes, FITTED.max_ctx_fits) == (123, 45, 2048)
    assert FITTED.fit_label == "fits in host memory"
    unchecked = dataclasses.replace(FITTED, fit=None, memory=None)
    assert (unchecked.memory_bytes, unchecked.max_ctx_fits, unchecked.fit_label) == (0, None, None)


def test_a_context_lowered_by_the_memory_check_and_one_capped_at_training_are_told_apart():
    assert FITTED.context_lowered
    capped = dataclasses.replace(FITTED, n_ctx=1024, n_ctx_requested=4096, n_ctx_train=1024)
    assert not capped.context_lowered  # the model's own limit, not memory
    assert not dataclasses.replace(FITTED, fit=None).context_lowered  # nothing checked, nothing lowered


def test_capabilities_follow_what_the_model_answers():
    assert FITTED.capabilities == ["completion", "tools", "thinking"]
    assert dataclasses.replace(FITTED, tool_format="", thinks=False).capabilities == ["completion"]
    assert dataclasses.replace(FITTED, kind=EMBEDDING).capabilities == ["embedding"]
