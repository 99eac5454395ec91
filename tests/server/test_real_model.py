"""The endpoint on a real quantized model of another family (Gemma 3 270M, Q4_K_M),
through the official ``openai`` client: chat in the model's own format with no markup in
the reply, and raw completions with the BOS token the vocabulary asks for."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings
from tests.engine.cli_helpers import mtp_json

NAME = "gemma-3-270m"
MARKUP = ("<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>", "<bos>")


@pytest.fixture(scope="module")
def gemma_client(gemma):
    from openai import OpenAI

    eng = Engine(EngineConfig(request=Defaults(draft_depth="auto"))).start()
    eng.submit(J.LoadModel(LoadSpec(gemma, n_ctx=1024, name=NAME))).result(120)
    srv = ServerThread(eng, ServerSettings(port=0)).start()
    srv.wait_ready()
    with OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c
    srv.stop()
    eng.stop()


def test_completions_on_the_real_model_count_the_bos_like_the_cli(gemma_client, gemma):
    """Runs first in this module, on a fresh context, like the CLI: llama.cpp's CPU
    kernels are not batch-invariant, so a prompt decoded after a different prefix split
    (reusing a cached prefix) can flip near-tie tokens of a real model."""
    prompt = "Once upon a time, in a small village by the sea, there lived"
    r = gemma_client.completions.create(model=NAME, prompt=prompt, max_tokens=24)
    cli = mtp_json("generate", "--model", str(gemma), "--prompt", prompt, "--max-tokens", "24")
    assert r.choices[0].text == cli["text"]
    assert r.usage.prompt_tokens == cli["stats"]["prompt_tokens"] == 16  # 15 text tokens + BOS


def test_chat_streamed_and_not_on_the_real_model(gemma_client):
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    full = gemma_client.chat.completions.create(model=NAME, messages=messages, max_tokens=32)
    text = full.choices[0].message.content
    assert text.strip() and not any(m in text for m in MARKUP)
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in gemma_client.chat.completions.create(model=NAME, messages=messages, max_tokens=32, stream=True)
        if c.choices
    )
    assert streamed == text
