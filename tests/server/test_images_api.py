"""Pictures through the real HTTP server with the official clients (openai: chat and
Responses; anthropic; ollama): the demo loaded with a tiny real projector, one picture
asked about through each API gives the reply the engine gives in process, and two
pictures give different replies."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from engine.runtime import jobs as J
from engine.runtime.load.loader import LoadSpec
from engine.runtime.media import Media, part
from engine.server.settings import ServerSettings
from tests.server.serving import serving
from tests.synth.images import png_bytes
from tests.synth.projector import write_projector

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo.gguf"
QUESTION = "What is in this picture?"
N = 24


@pytest.fixture(scope="module")
def seeing(tmp_path_factory):
    mmproj = write_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-demo.gguf", "qwen3vl_merger", 192)
    spec = LoadSpec(DEMO, n_ctx=2048, probe=False, fit="off", name="demo", mmproj=mmproj)
    with serving([spec], ServerSettings(port=0)) as served:
        yield served


def png(seed: int) -> bytes:
    return png_bytes(64, 48, seed)


def b64(seed: int) -> str:
    return base64.b64encode(png(seed)).decode()


def in_process(engine, seed: int, picture_first: bool = False) -> str:
    m = Media("image", png(seed), "image/png", 64, 48)
    content = [{"type": "text", "text": QUESTION}, part(m)]
    messages = [{"role": "user", "content": content[::-1] if picture_first else content}]
    return engine.submit(J.Generate(messages=messages, max_tokens=N, temperature=0.0)).result().text


@pytest.fixture(scope="module")
def want(seeing):
    return {seed: in_process(seeing[1], seed) for seed in (1, 2)}


def test_the_model_lists_as_seeing(seeing):
    url = seeing[0].url
    (m,) = httpx.get(url + "/v1/models").json()["data"]
    assert m["meta"]["vision"] is True and "vision" in m["meta"]["capabilities"]
    show = httpx.post(url + "/api/show", json={"model": "demo"}).json()
    assert "vision" in show["capabilities"]


def test_openai_chat_completions(seeing, want):
    from openai import OpenAI

    def ask(c, seed: int, **kw):
        picture = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(seed)}"}}
        messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, picture]}]
        return c.chat.completions.create(model="demo", messages=messages, max_tokens=N, temperature=0, **kw)

    with OpenAI(base_url=seeing[0].url + "/v1", api_key="unused", max_retries=0) as c:
        got = {}
        for seed in (1, 2):
            r = ask(c, seed)
            got[seed] = r.choices[0].message.content or ""
            assert r.usage.prompt_tokens > 12 + 5  # the picture's 12 rows and the text
        # two pictures, two replies (with ignore_eos: whatever the replies' ends)
        longer = {seed: ask(c, seed, extra_body={"ignore_eos": True}).choices[0].message.content for seed in (1, 2)}
    assert got == want
    assert longer[1] != longer[2]


def test_openai_responses(seeing, want):
    from openai import OpenAI

    with OpenAI(base_url=seeing[0].url + "/v1", api_key="unused", max_retries=0) as c:
        r = c.responses.create(
            model="demo",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": QUESTION},
                        {"type": "input_image", "image_url": f"data:image/png;base64,{b64(1)}", "detail": "auto"},
                    ],
                }
            ],
            max_output_tokens=N,
            temperature=0,
        )
    assert r.output_text == want[1]


def test_anthropic_messages(seeing, want):
    import anthropic

    with anthropic.Anthropic(base_url=seeing[0].url, api_key="unused", max_retries=0) as c:
        r = c.messages.create(
            model="demo",
            max_tokens=N,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": QUESTION},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(2)}},
                    ],
                }
            ],
        )
    assert "".join(b.text for b in r.content if b.type == "text") == want[2]


def test_anthropic_tool_result_with_a_screenshot(seeing):
    """Claude Code sends screenshots inside tool results: the picture reaches the model
    (the prompt holds its rows), and two screenshots give two different prompts' replies."""
    import anthropic

    tool = {"name": "screenshot", "description": "Take a screenshot", "input_schema": {"type": "object"}}
    counts = {}
    with anthropic.Anthropic(base_url=seeing[0].url, api_key="unused", max_retries=0) as c:
        for seed in (1, 2):
            r = c.messages.create(
                model="demo",
                max_tokens=8,
                tools=[tool],
                messages=[
                    {"role": "user", "content": "Look at the screen."},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "screenshot", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "content": [
                                    {"type": "text", "text": "the screen:"},
                                    {
                                        "type": "image",
                                        "source": {"type": "base64", "media_type": "image/png", "data": b64(seed)},
                                    },
                                ],
                            }
                        ],
                    },
                ],
            )
            counts[seed] = r.usage.input_tokens
    assert counts[1] == counts[2] and counts[1] > 12  # same shape, the picture's rows counted


def test_ollama_chat(seeing):
    """Ollama puts a message's pictures before its text (where the text marks no place)."""
    import ollama

    c = ollama.Client(host=seeing[0].url)
    r = c.chat(
        model="demo",
        messages=[{"role": "user", "content": QUESTION, "images": [png(1)]}],
        options={"num_predict": N, "temperature": 0},
    )
    assert r.message.content == in_process(seeing[1], 1, picture_first=True)


def test_a_bad_picture_is_refused_and_the_engine_serves_on(seeing, want):
    url = seeing[0].url
    body = {
        "model": "demo",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(1)[:-40]}}],
            }
        ],
    }
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and "messages[0].content[0]" in r.json()["error"]["message"]
    assert in_process(seeing[1], 1) == want[1]


def test_count_tokens_counts_a_picture_without_encoding_it(seeing):
    """Claude Code asks count_tokens constantly: it runs between the running streams' steps,
    so it tokenizes the picture (its rows counted) without running the encoder."""
    (lm,) = seeing[1]._state.models.values()  # the seam: the projector's encode count
    before = lm.projector.encodes
    body = {
        "model": "demo",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": QUESTION},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(77)}},
                ],
            }
        ],
    }
    r = httpx.post(seeing[0].url + "/v1/messages/count_tokens", json=body, timeout=30)
    assert r.status_code == 200 and r.json()["input_tokens"] > 12
    assert lm.projector.encodes == before
