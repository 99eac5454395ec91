"""The fake Hub (real HTTP on 127.0.0.1), repos of generated GGUF fixtures, and a fresh
library per test. ``HF_ENDPOINT`` points the real ``huggingface_hub`` client at it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.gguf.split import split_model
from engine.hub.library import Library
from engine.hub.remote import HubConfig
from engine.synth.qwen35 import build_model
from tests.engine.hub.fakehub import FakeHub, FakeHubServer
from tests.models import RECIPES


@pytest.fixture(scope="module")
def hub_files(fixtures, tmp_path_factory):
    d = tmp_path_factory.mktemp("hubfiles")
    fx = fixtures["partial"]
    shards = split_model(fx.trunk, 3, d / "tiny-Q8_0")
    other = replace(RECIPES["partial"], n_merges=150)
    build_model(other, d / "other.gguf", head_path=d / "mtp-other.gguf")
    return {
        "trunk": fx.trunk.read_bytes(),
        "head": fx.head.read_bytes(),
        "integrated": fx.path.read_bytes(),
        "shards": [p.read_bytes() for p in shards],
        "shard_names": [p.name for p in shards],
        "other_head": (d / "mtp-other.gguf").read_bytes(),
    }


@pytest.fixture
def hub(hub_files, monkeypatch):
    h = FakeHub()
    h.add_repo(
        "acme/Tiny-GGUF",
        {
            "tiny-Q8_0.gguf": hub_files["trunk"],
            "tiny-F16.gguf": hub_files["integrated"],
            "mtp-tiny-F16.gguf": hub_files["head"],
            "README.md": b"# Tiny\n",
        },
        downloads=500,
    )
    h.add_repo(
        "acme/Sharded-GGUF",
        {**dict(zip(hub_files["shard_names"], hub_files["shards"])), "mtp-tiny.gguf": hub_files["head"]},
        downloads=900,
    )
    h.add_repo("acme/Broken-GGUF", dict(zip(hub_files["shard_names"][::2], hub_files["shards"][::2])), downloads=10)
    h.add_repo("other/Other-GGUF", {"mtp-other.gguf": hub_files["other_head"]}, downloads=1)
    with FakeHubServer(h):
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield h


@pytest.fixture
def cfg(hub) -> HubConfig:
    return HubConfig.from_env()


@pytest.fixture
def library(tmp_path) -> Library:
    return Library(tmp_path / "library")
