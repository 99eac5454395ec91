"""Images and audio in each API become the conversation's media parts (engine.server.apis.mediaparts):
the same bytes, in order with the text. The parsers are called as the routes call them (no model
needed); bad media is refused through the real server in each API's own error shape, before the
engine is given a job."""

from __future__ import annotations

import base64
import io
import wave

import httpx2 as httpx
import pytest

from engine.runtime.decider import resolve
from engine.runtime.media import MEDIA_PART, Media
from engine.runtime.modelinfo import ModelInfo
from engine.server.apis import messages as messages_api, ollama as ollama_api, responses as responses_api
from engine.server.errors import HTTPError
from engine.server.apis.mediaparts import chat_messages
from engine.server.routes import chat as chat_route
from engine.server.settings import ServerSettings
from tests.server.conftest import MODEL
from tests.synth.images import bmp_bytes, gif_bytes, jpeg_bytes, png_bytes, truncated_png

MODELS = {"m": ModelInfo(name="m", path="m.gguf", n_ctx=4096)}
PNG, JPEG, GIF, BMP = png_bytes(9, 7, 1), jpeg_bytes(16, 8, 2), gif_bytes(5, 4, 3), bmp_bytes(6, 3, 4)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{b64(data)}"


def wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(640))
    return out.getvalue()


def shape(content) -> list:
    """A message's content as ("text", text) and (mime, bytes) in order."""
    if isinstance(content, str):
        return [("text", content)]
    out = []
    for p in content:
        if p["type"] == MEDIA_PART:
            assert isinstance(p["media"], Media)
            out.append((p["media"].mime, p["media"].data))
        else:
            out.append(("text", p["text"]))
    return out


# ------------------------------------------------------------- chat completions
def test_chat_image_url_and_input_audio_parts_become_media_parts_in_order():
    sound = wav()
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    {"type": "image_url", "image_url": {"url": uri(PNG), "detail": "low"}},
                    {"type": "text", "text": "with"},
                    {"type": "image_url", "image_url": b64(JPEG)},  # a bare string, bare base64
                    {"type": "input_audio", "input_audio": {"data": b64(sound), "format": "wav"}},
                ],
            },
        ],
    }
    parsed = chat_route._parse(body, MODELS, resolve, ServerSettings())
    system, user = parsed.job.messages
    assert system["content"] == "Be brief."
    assert shape(user["content"]) == [
        ("text", "Compare"),
        ("image/png", PNG),
        ("text", "with"),
        ("image/jpeg", JPEG),
        ("audio/wav", sound),
    ]
    assert user["content"][1]["media"].width == 9 and user["content"][3]["media"].height == 8
    text_only = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert chat_messages(text_only) is text_only  # nothing to convert: the same list


def test_chat_bad_media_is_refused_naming_the_part():
    def said(part) -> str:
        with pytest.raises(HTTPError) as e:
            chat_messages([{"role": "user", "content": [{"type": "text", "text": "x"}, part]}])
        assert e.value.status == 400 and e.value.param.startswith("messages[0].content[1]")
        return e.value.message

    assert said({"type": "image_url", "image_url": {"url": uri(truncated_png())}}).startswith(
        "messages[0].content[1].image_url is a PNG cut short"
    )
    assert "fetching URLs is off" in said({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}})
    assert "needs a URL" in said({"type": "image_url", "image_url": {}})
    assert "format must be 'wav' or 'mp3'" in said(
        {"type": "input_audio", "input_audio": {"data": "", "format": "ogg"}}
    )
    assert "input_audio must be" in said({"type": "input_audio", "input_audio": "AAAA"})
    assert "is a PNG image, not audio" in said({"type": "input_audio", "input_audio": {"data": b64(PNG)}})


# -------------------------------------------------------------------- Responses
def test_responses_input_images_in_messages_and_function_call_outputs():
    body = {
        "model": "m",
        "instructions": "Look closely.",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look"},
                    {"type": "input_image", "image_url": uri(PNG), "detail": "auto"},
                    {"type": "input_image", "image_url": {"url": b64(GIF)}},
                ],
            },
            {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_text", "text": "Screen:"}, {"type": "input_image", "image_url": uri(BMP)}],
            },
        ],
    }
    req = responses_api.parse(body, MODELS, resolve, None)
    system, user, call, result = req.job.messages
    assert system["content"] == "Look closely." and call["tool_calls"][0]["id"] == "c1"
    assert shape(user["content"]) == [("text", "Look"), ("image/png", PNG), ("image/gif", GIF)]
    assert result["role"] == "tool" and shape(result["content"]) == [("text", "Screen:"), ("image/bmp", BMP)]


@pytest.mark.parametrize(
    "part,said",
    [
        ({"type": "input_image", "file_id": "file-123"}, "input[0].content[0] names an uploaded file (file_id)"),
        ({"type": "input_file", "file_data": "AAAA"}, "input[0].content[0] is a 'input_file' part"),
        ({"type": "input_image", "image_url": uri(b"RIFF\x00\x00\x00\x00WEBPVP8 ")}, "is a WEBP image"),
    ],
)
def test_responses_refusals_name_the_part(part, said):
    with pytest.raises(HTTPError) as e:
        responses_api.parse({"model": "m", "input": [{"role": "user", "content": [part]}]}, MODELS, resolve, None)
    assert said in e.value.message


def test_responses_an_image_in_an_assistant_turn_is_refused():
    item = {"role": "assistant", "content": [{"type": "input_image", "image_url": uri(PNG)}]}
    with pytest.raises(HTTPError) as e:
        responses_api.input_messages([item])
    assert "input[0].content[0] is an image in an assistant turn" in e.value.message


# ----------------------------------------------------------- Anthropic Messages
def test_messages_image_blocks_in_user_turns_and_tool_results():
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}},
                ],
            },
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "screenshot", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "Here:"},
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(JPEG)},
                            },
                        ],
                    },
                    {"type": "image", "source": {"type": "url", "url": uri(GIF, "image/gif")}},
                    {"type": "text", "text": "And now?"},
                ],
            },
        ],
    }
    first, call, result, user = messages_api.parse(body, MODELS, resolve, None).job.messages
    assert shape(first["content"]) == [("text", "What is this?"), ("image/png", PNG)]
    assert call["tool_calls"][0]["id"] == "t1"
    assert result["role"] == "tool" and shape(result["content"]) == [("text", "Error: Here:"), ("image/jpeg", JPEG)]
    assert shape(user["content"]) == [("image/gif", GIF), ("text", "And now?")]


@pytest.mark.parametrize(
    "block,said",
    [
        ({"type": "image", "source": {"type": "file", "file_id": "f"}}, "source must be {'type': 'base64'"),
        ({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}, "fetching URLs is off"),
        ({"type": "image", "source": {"type": "base64", "media_type": "text/plain", "data": b64(PNG)}}, "text/plain"),
        ({"type": "document", "source": {"type": "text", "data": "x"}}, "is a 'document' block"),
    ],
)
def test_messages_refusals_name_the_block(block, said):
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [block]}]}
    with pytest.raises(HTTPError) as e:
        messages_api.parse(body, MODELS, resolve, None)
    assert e.value.message.startswith("messages[0].content[0]") and said in e.value.message


# ----------------------------------------------------------------------- Ollama
def test_ollama_chat_images_go_where_the_text_says_img_and_the_rest_first():
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "What is in these?", "images": [b64(PNG), b64(JPEG)]},
            {"role": "assistant", "content": "Two pictures."},
            {"role": "user", "content": "Is [img] like this?", "images": [b64(GIF), b64(BMP)]},
        ],
    }
    first, _, last = ollama_api.parse(body, MODELS, resolve, None, chat=True).job.messages
    assert shape(first["content"]) == [("image/png", PNG), ("image/jpeg", JPEG), ("text", "What is in these?")]
    assert shape(last["content"]) == [("image/bmp", BMP), ("text", "Is "), ("image/gif", GIF), ("text", " like this?")]


def test_ollama_generate_images_join_the_prompt_and_raw_prompts_refuse_them():
    body = {"model": "m", "prompt": "Describe it.", "system": "Be brief.", "images": [b64(PNG)]}
    system, user = ollama_api.parse(body, MODELS, resolve, None, chat=False).job.messages
    assert system["content"] == "Be brief."
    assert shape(user["content"]) == [("image/png", PNG), ("text", "Describe it.")]
    with pytest.raises(HTTPError) as e:
        ollama_api.parse({**body, "raw": True}, MODELS, resolve, None, chat=False)
    assert "'images' cannot go with 'raw'" in e.value.message
    with pytest.raises(HTTPError) as e:
        ollama_api.parse({**body, "images": b64(PNG)}, MODELS, resolve, None, chat=False)
    assert "images must be a list of base64-encoded images" in e.value.message


def test_media_from_each_api_passes_the_request_step_unchanged():
    """The engine's request step (the decider) keeps the media parts as they are."""
    msgs = [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": uri(PNG)}]}]
    job = chat_route._parse({"model": "m", "messages": msgs}, MODELS, resolve, ServerSettings()).job
    assert job.resolved and job.messages[0]["content"][1]["media"].data == PNG


# --------------------------------------------------- through the real server
@pytest.fixture
def no_engine(engine, monkeypatch):
    """The engine refuses every job: a request that reaches it is a 500, not a 400."""

    def submit(*args, **kwargs):
        raise AssertionError("bad media reached the engine")

    monkeypatch.setattr(engine, "submit", submit)


CUT = uri(truncated_png())
ASKS = [
    (
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": CUT}}]}]},
        lambda j: (j["error"]["message"], j["error"]["param"]),
        "messages[0].content[0].image_url is a PNG cut short",
    ),
    (
        "/v1/responses",
        {"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": CUT}]}]},
        lambda j: (j["error"]["message"], j["error"]["param"]),
        "input[0].content[0].image_url is a PNG cut short",
    ),
    (
        "/v1/messages",
        {
            "model": MODEL,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AB$"}}]}],
        },
        lambda j: (j["type"] == "error" and j["error"]["type"] == "invalid_request_error" and j["error"]["message"], 0),
        "messages[0].content[0].source.data is not valid base64",
    ),
    (
        "/v1/messages/count_tokens",
        {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]},
        lambda j: (j["error"]["message"], 0),
        "messages[0].content[0].source.data must be a base64 string",
    ),
    (
        "/api/chat",
        {"model": MODEL, "messages": [{"role": "user", "content": "x", "images": [b64(GIF)[:-8]]}]},
        lambda j: (j["error"], 0),
        "messages[0].images[0] is a GIF cut short",
    ),
    (
        "/api/generate",
        {"model": MODEL, "prompt": "x", "images": [b64(b"<svg/>")]},
        lambda j: (j["error"], 0),
        "images[0] is an SVG drawing",
    ),
]


@pytest.mark.parametrize("path,body,read,said", ASKS, ids=[a[0] for a in ASKS])
def test_bad_media_is_a_400_in_each_apis_shape_before_the_engine_runs(server, no_engine, path, body, read, said):
    r = httpx.post(server.url + path, json=body, timeout=30)
    assert r.status_code == 400, r.text
    message, param = read(r.json())
    assert isinstance(message, str) and message.startswith(said), r.text
    if param:  # OpenAI's shape names the part
        assert param == said.split(" ")[0]


def test_the_endpoints_media_settings_reach_every_parser(make_server, no_engine, tmp_path):
    (tmp_path / "cut.png").write_bytes(truncated_png())
    url = (tmp_path / "cut.png").as_uri()

    def ask(srv) -> str:
        msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        r = httpx.post(srv.url + "/v1/chat/completions", json={"model": MODEL, "messages": [msg]}, timeout=30)
        assert r.status_code == 400, r.text
        return r.json()["error"]["message"]

    plain = make_server()
    r = httpx.post(
        plain.url + "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 500  # what reaching the engine looks like here: the 400s above did not
    assert "reading files is off" in ask(plain)
    assert "is a PNG cut short" in ask(make_server(media_folder=str(tmp_path)))  # read, then checked
    srv = make_server(media_urls=True)
    body = {
        "model": MODEL,
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://127.0.0.1:9/x.png"}]}],
    }
    r = httpx.post(srv.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 400 and "could not be fetched" in r.json()["error"]["message"], r.text
    with pytest.raises(ValueError, match="is not a folder"):
        ServerSettings(media_folder=str(tmp_path / "nope")).check()
