"""Structured output through the endpoint, with the clients people connect: the official
`openai` client's ``parse()`` with a Pydantic model and pydantic-ai's native structured
output, on the served demo (a real MTP head, auto depth); llama-server's ``json_schema``
and ``grammar`` fields; and every bad constraint a clear 400."""

from __future__ import annotations

import json
from typing import Literal

import httpx2 as httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from engine.runtime import jobs as J
from engine.runtime.decode.depth import AUTO
from engine.runtime.engine import EngineConfig
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.synth.demo import demo_model_path
from tests.server.serving import serving

MODEL = "demo"


class Pet(BaseModel):
    kind: Literal["cat", "dog", "fish"]
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=30)


@pytest.fixture(scope="module")
def served():
    spec = LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED, n_ctx=1024, name=MODEL)
    with serving([spec], defaults=EngineConfig(request=J.Defaults(draft_depth=AUTO))) as (srv, _):
        yield srv


@pytest.fixture
def client(served):
    with openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def test_openai_parse_with_a_pydantic_model(client):
    r = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Tell me about a pet."}], response_format=Pet, max_tokens=80
    )
    pet = r.choices[0].message.parsed
    assert isinstance(pet, Pet) and r.choices[0].finish_reason == "stop"
    assert r.model_extra["timings"]["speculative"] is True  # MTP ran under the grammar


def test_pydantic_ai_native_structured_output(served):
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=served.url + "/v1", api_key="unused"))
    agent = Agent(model, output_type=NativeOutput(Pet), model_settings={"max_tokens": 80})
    result = agent.run_sync("Tell me about a pet.")
    assert isinstance(result.output, Pet)


def test_json_object_and_streamed_json_schema(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "A JSON object, please."}],
        response_format={"type": "json_object"},
        max_tokens=120,
    )
    text = r.choices[0].message.content
    # any object: the demo may talk inside a string until max_tokens, but never outside JSON
    assert text.startswith("{") and (r.choices[0].finish_reason == "length" or isinstance(json.loads(text), dict))
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}},
        "required": ["n"],
        "additionalProperties": False,
    }
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "A number."}],
        max_tokens=40,
        stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)


def test_llama_server_fields_on_completions(served):
    url = served.url + "/v1/completions"
    r = httpx.post(
        url, json={"model": MODEL, "prompt": "Colour:", "max_tokens": 10, "grammar": 'root ::= "red" | "green"'}
    )
    assert r.status_code == 200 and r.json()["choices"][0]["text"] in ("red", "green")
    r = httpx.post(url, json={"model": MODEL, "prompt": "Code:", "max_tokens": 10, "regex": "[0-9]{4}"})
    assert (
        r.status_code == 200 and len(r.json()["choices"][0]["text"]) == 4 and r.json()["choices"][0]["text"].isdigit()
    )
    schema = {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}
    r = httpx.post(url, json={"model": MODEL, "prompt": "Two flags:", "max_tokens": 20, "json_schema": schema})
    assert r.status_code == 200
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), schema)


def test_a_structure_cut_short_says_length(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "A pet."}],
        max_tokens=3,
        response_format={"type": "json_schema", "json_schema": {"name": "pet", "schema": Pet.model_json_schema()}},
    )
    assert r.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    "extra,param",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
            "response_format",
        ),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"grammar": "root ::= undefined_rule"}, "grammar"),
        ({"regex": "(("}, "regex"),
        ({"json_schema": {"enum": ["x" * 100] * 5000}}, "json_schema"),
        ({"json_schema": {"type": "object"}, "grammar": 'root ::= "a"'}, "grammar"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"presence_penalty": 3}, "presence_penalty"),
    ],
)
def test_bad_constraints_are_400s_with_words(served, extra, param):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    r = httpx.post(served.url + "/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]


def test_logprobs_on_chat_and_completions(client):
    msgs = [{"role": "user", "content": "Hello!"}]
    got = {}
    for mtp in ("off", "on"):
        r = client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=16, logprobs=True, top_logprobs=3, extra_body={"mtp": mtp}
        )
        content = r.choices[0].logprobs.content
        assert "".join(e.token for e in content) == r.choices[0].message.content
        for e in content:  # greedy: the chosen token is the most likely one, and probabilities sum below 1
            assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
            assert (
                e.logprob == pytest.approx(e.top_logprobs[0].logprob)
                and sum(2.718281828**t.logprob for t in e.top_logprobs) <= 1.0001
            )
        got[mtp] = [e.logprob for e in content]
    assert got["on"] == pytest.approx(got["off"], abs=1e-3)  # the same rows, verified in a batch or one at a time
    stream = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, logprobs=True, stream=True)
    streamed = [e for c in stream if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert len(streamed) == 8 and all(not e.top_logprobs for e in streamed)
    c = client.completions.create(model=MODEL, prompt="def f(x):", max_tokens=6, logprobs=2)
    lp = c.choices[0].logprobs
    assert (
        len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
        and "".join(lp.tokens) == c.choices[0].text
    )
    assert lp.text_offset[0] == 0 and all(len(t) == 2 for t in lp.top_logprobs)
