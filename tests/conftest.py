"""Session-wide test setup: isolated app folders and the tiny fixture models."""

from __future__ import annotations

import os

os.environ.setdefault("GGML_NO_BACKTRACE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from tests.models import RECIPES, Fixture, build_fixture


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
