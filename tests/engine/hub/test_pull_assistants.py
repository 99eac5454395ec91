"""A Gemma 4 target's drafter found beside it on the Hub: named as repos name them (an
``MTP/`` folder, ``-assistant`` files), the one made for the target chosen by its remote
header, downloaded with it, paired in the library, and drafting — against the fake Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import HeadMismatchError
from engine.hub.files import head_for
from engine.hub.pull import pull
from engine.hub.remote import HubConfig, list_gguf, read_remote_header
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from tests.engine.hub.fakehub import FakeHub, FakeHubServer

REPO = "acme/gemma-4-tiny-it-GGUF"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("gemma4hub")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.synth.families", str(out), "gemma4", "qwen35moe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    index = json.loads(done.stdout.strip().splitlines()[-1])
    read = lambda key, name: Path(index[key][name]).read_bytes()  # noqa: E731
    return {
        "gemma-4-tiny-it-Q8_0.gguf": read("gemma4", "target"),
        # the drafter made for it, and another model's head kept in the same folder
        "MTP/gemma-4-tiny-it-MTP-F32.gguf": read("gemma4", "head"),
        "MTP/qwen-tiny-MTP-F32.gguf": read("qwen35moe", "head"),
        "README.md": b"# tiny gemma 4\n",
    }


@pytest.fixture
def cfg(files, monkeypatch):
    h = FakeHub()
    h.add_repo(REPO, files, downloads=3)
    h.add_repo(
        "acme/other-assistant-GGUF", {"gemma-4-tiny-it-assistant-F32.gguf": files["MTP/gemma-4-tiny-it-MTP-F32.gguf"]}
    )
    with FakeHubServer(h):
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield HubConfig.from_env()


def test_drafters_are_listed_as_heads_beside_their_target(cfg):
    _, groups = list_gguf(cfg, REPO)
    kinds = {g.name: g.head for g in groups}
    assert kinds == {
        "gemma-4-tiny-it-Q8_0.gguf": False,
        "MTP/gemma-4-tiny-it-MTP-F32.gguf": True,
        "MTP/qwen-tiny-MTP-F32.gguf": True,
    }
    target = next(g for g in groups if not g.head)
    assert head_for(groups, target).name == "MTP/gemma-4-tiny-it-MTP-F32.gguf"
    rev = list_gguf(cfg, REPO)[0]
    assert read_remote_header(cfg, REPO, "MTP/gemma-4-tiny-it-MTP-F32.gguf", rev).mtp == "assistant"
    _, other = list_gguf(cfg, "acme/other-assistant-GGUF")
    assert [g.head for g in other] == [True]  # "-assistant" names a drafter too


def test_pull_takes_the_drafter_made_for_the_target_and_it_drafts(cfg, tmp_path):
    from engine.hub.library import Library

    library = Library(tmp_path / "library")
    r = pull(cfg, library, REPO, head=REPO)  # several heads: the one whose header pairs
    assert r.head is not None and r.head.files[0].endswith("gemma-4-tiny-it-MTP-F32.gguf")
    assert library.get(r.model.id).pair == r.head.id
    lm = load(
        LoadSpec(
            r.model.path(library.root),
            head=r.head.path(library.root),
            mtp=MtpSource.AUTO,
            n_ctx=256,
            probe=False,
            fit="off",
        )
    )
    try:
        assert lm.info.drafting == "shared"
        prompt = lm.model.prompt_tokens("Hello! Tell me a story.")
        plain = generate(lm.session, prompt, DecodeParams(max_tokens=24, ignore_eog=True)).tokens
        lm.session.reset()
        g = generate(lm.session, prompt, DecodeParams(max_tokens=24, ignore_eog=True, depth=FixedDepth(2)))
        assert g.tokens == plain and g.stats.accepted > 0
    finally:
        lm.close()


def test_a_head_made_for_another_model_is_refused_before_downloading(cfg, tmp_path):
    from engine.hub.library import Library

    library = Library(tmp_path / "library")
    with pytest.raises(HeadMismatchError):
        pull(cfg, library, REPO, head=f"{REPO}:MTP/qwen-tiny-MTP-F32.gguf")
    assert library.entries() == []
