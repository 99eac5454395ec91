"""The endpoint through the official ``openai`` client (sync and async)."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from engine.runtime import jobs as J
from tests.engine.cli_helpers import mtp_json
from tests.server.conftest import MODEL

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about cats."}]


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].object == "model"


def test_chat_streamed_equals_non_streamed_equals_cli(client, fixtures, tmp_path):
    full = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40)
    text = full.choices[0].message.content
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 40
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=40, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 40
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(MESSAGES))
    cli = mtp_json("generate", "--model", str(fixtures["partial"].path), "--chat-json", str(chat), "--max-tokens", "40")
    assert cli["text"] == text


def test_completion_streamed_equals_non_streamed_equals_cli(client, fixtures):
    prompt = "The quick brown fox"
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=30)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model=MODEL, prompt=prompt, max_tokens=30, stream=True)
        if c.choices
    )
    assert streamed == full.choices[0].text
    cli = mtp_json("generate", "--model", str(fixtures["partial"].path), "--prompt", prompt, "--max-tokens", "30")
    assert cli["text"] == full.choices[0].text
    assert full.usage.prompt_tokens == cli["stats"]["prompt_tokens"] and full.usage.completion_tokens == 30


def test_prompt_as_token_ids(client, engine):
    ids = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=1).usage.prompt_tokens
    tokens = engine.submit(J.Call(lambda st, c, e: st.get(MODEL).model.tokenize("Hello there"))).result(10)
    assert len(tokens) == ids
    by_ids = client.completions.create(model=MODEL, prompt=tokens, max_tokens=20)
    by_text = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=20)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_timings_in_llama_server_shape(client):
    r = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=16)
    body = json.loads(r.text)
    t = body["timings"]
    for key in (
        "prompt_n",
        "prompt_ms",
        "predicted_n",
        "predicted_ms",
        "predicted_per_second",
        "draft_n",
        "draft_n_accepted",
    ):
        assert key in t
    assert t["predicted_n"] == 16 and t["speculative"] is True and t["sampling"] == "greedy"
    assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]


def test_sampling_with_a_seed_is_reproducible_speculative_and_equal_to_plain_sampling(client):
    def once(**extra):
        r = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0.9, seed=42, extra_body=extra or None
        )
        return json.loads(r.text)

    a, b = once(), once()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["timings"]["sampling"] == "sampled" and a["timings"]["speculative"] is True and a["timings"]["draft_n"] > 0
    plain = once(mtp="off")
    assert plain["timings"]["speculative"] is False and plain["timings"]["draft_n"] == 0
    # argmax drafts + sample-and-compare: the same seed gives plain sampling's text
    assert plain["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]
    sampled = once(sampled_draft=True)
    assert sampled["timings"]["draft_n"] > 0
    greedy = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24)
    assert greedy.choices[0].message.content != a["choices"][0]["message"]["content"]


def test_stop_and_max_completion_tokens(client):
    ref = client.completions.create(model=MODEL, prompt="One two", max_tokens=30).choices[0].text
    stop = ref[10:13]
    r = client.completions.create(model=MODEL, prompt="One two", max_tokens=30, stop=[stop])
    assert r.choices[0].text == ref[: ref.index(stop)] and r.choices[0].finish_reason == "stop"
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=5)
    assert r.usage.completion_tokens == 5


def test_unknown_model_is_404_not_the_default(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert e.value.body["code"] == "model_not_found" and "gpt-4o" in e.value.body["message"]


def test_unsupported_parameters_are_400(client):
    with pytest.raises(openai.BadRequestError, match="n=1"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, n=2)
    with pytest.raises(openai.BadRequestError, match="retired form"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, functions=[{"name": "f", "parameters": {}}])
    with pytest.raises(openai.BadRequestError, match="chat API"):
        client.completions.create(
            model=MODEL, prompt="x", extra_body={"tools": [{"type": "function", "function": {"name": "f"}}]}
        )


def test_async_client_eight_concurrent_streams(server, client):
    prompts = [f"Question {i}: what is {i} plus {i}?" for i in range(8)]
    want = [client.completions.create(model=MODEL, prompt=p, max_tokens=24).choices[0].text for p in prompts]

    async def one(c, p):
        parts = []
        async for chunk in await c.completions.create(model=MODEL, prompt=p, max_tokens=24, stream=True):
            if chunk.choices:
                parts.append(chunk.choices[0].text)
        return "".join(parts)

    async def main():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as c:
            return await asyncio.gather(*(one(c, p) for p in prompts))

    assert asyncio.run(main()) == want
