"""The APIs coding agents speak — OpenAI Responses, Anthropic Messages, Ollama's — on the
same engine, exercised with each API's official client (``openai``, ``anthropic``,
``ollama``, ``openai-agents``) against a real server, on tiny models carrying two real
chat templates: Qwen3.5's (thinking, XML calls; it refuses a system message anywhere but
first) and Qwen2.5's (Hermes-style JSON calls)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from engine.server import flow as flow_mod
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

from tests.server.agentapis import ASK, HERMES, PET, QWEN, WEATHER


# ------------------------------------------------------------------ Messages
def test_messages_text_thinking_and_usage_match_count_tokens(claude):
    kw = {
        "model": QWEN,
        "system": [{"type": "text", "text": "You are brief."}],
        "messages": [{"role": "user", "content": "Say hi."}],
    }
    m = claude.messages.create(max_tokens=40, thinking={"type": "enabled", "budget_tokens": 8}, **kw)
    assert m.content[0].type == "thinking" and m.content[0].thinking
    assert m.stop_reason in ("end_turn", "max_tokens")
    counted = claude.messages.count_tokens(thinking={"type": "enabled", "budget_tokens": 8}, **kw).input_tokens
    assert counted == m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_a_forced_call_cut_short_ends_the_same_way_in_every_api(claude, oai, agent_served):
    """A call cut by the length limit is unfinished in every API, never a call to run:
    Messages says max_tokens (it said tool_use, with an empty input a client would run),
    chat completions length, Responses incomplete, Ollama length."""
    import ollama

    tool = {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}
    for cut in (32, 48):  # inside the call: its name written, its arguments not yet (the demo spells them out)
        m = claude.messages.create(
            model=HERMES,
            max_tokens=cut,
            tools=[tool],
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": ASK}],
        )
        assert m.stop_reason == "max_tokens", (cut, m.content)
        chat = oai.chat.completions.create(
            model=HERMES,
            max_tokens=cut,
            tools=[{"type": "function", "function": WEATHER}],
            tool_choice="required",
            messages=[{"role": "user", "content": ASK}],
        )
        assert chat.choices[0].finish_reason == "length"
        r = oai.responses.create(
            model=HERMES,
            max_output_tokens=cut,
            tools=[{"type": "function", **WEATHER}],
            tool_choice="required",
            input=ASK,
        )
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        o = ollama.Client(host=agent_served[0].url).chat(
            model=HERMES,
            messages=[{"role": "user", "content": ASK}],
            tools=[{"type": "function", "function": WEATHER}],
            options={"num_predict": cut},
        )
        assert o.done_reason == "length"
    # a whole call is one to run (one call: a tiny model forced to call writes calls until cut)
    m = claude.messages.create(
        model=HERMES,
        max_tokens=64,
        tools=[tool],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": ASK}],
    )
    assert m.stop_reason == "tool_use" and next(b for b in m.content if b.type == "tool_use").input


def test_messages_stream_and_a_tool_round_trip_with_tool_choice_any(claude):
    tools = [
        {"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    msgs = [{"role": "user", "content": ASK}]
    with claude.messages.stream(
        model=HERMES, max_tokens=64, tools=tools, tool_choice={"type": "any"}, messages=msgs
    ) as s:
        seen = list(s)
        m = s.get_final_message()
    events = [
        e.type
        for e in seen
        if e.type
        in (
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        )
    ]
    # the tool's input arrives as it is written, in input_json_delta pieces (as many as the
    # stream's pauses cut it into: on the fast demo often one; tests/server/test_bridge.py)
    pieces = [
        e.delta.partial_json for e in seen if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert pieces and json.loads("".join(pieces))["city"] in ("Paris", "Rome")
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert m.stop_reason == "tool_use"
    use = next(b for b in m.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input["city"] in ("Paris", "Rome") and use.id.startswith("toolu_")
    msgs += [
        {"role": "assistant", "content": [b.model_dump() for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny"}]},
    ]
    again = claude.messages.create(model=HERMES, max_tokens=16, tools=tools, messages=msgs)
    assert again.stop_reason in ("end_turn", "max_tokens", "tool_use") and again.content


def test_messages_errors_take_anthropics_shape(agent_served, claude):
    import anthropic

    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(
            model=QWEN,
            max_tokens=8,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
                    ],
                }
            ],
        )
    assert err.value.body["type"] == "error" and "image" in err.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    body = {"model": QWEN, "messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(agent_served[0].url + "/v1/messages", json=body)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error" and "max_tokens" in r.text


# ------------------------------------------------------------------- Ollama
def test_ollama_client_lists_shows_chats_streams_and_calls_tools(agent_served):
    import ollama

    c = ollama.Client(host=agent_served[0].url)
    assert httpx.get(agent_served[0].url + "/api/version").json()["version"]
    assert {m.model for m in c.list().models} == {QWEN, HERMES}
    shown = c.show(QWEN)
    assert {"completion", "tools", "thinking"} <= set(shown.capabilities)
    assert shown.modelinfo[f"{agent_served[1].models()[QWEN].architecture}.context_length"] == 4096
    parts = list(
        c.chat(
            model=HERMES, messages=[{"role": "user", "content": "Say hi."}], stream=True, options={"num_predict": 12}
        )
    )
    assert parts[-1].done and parts[-1].eval_count == 12 and "".join(p.message.content for p in parts)
    r = c.chat(
        model=HERMES,
        messages=[{"role": "user", "content": ASK}],
        options={"num_predict": 48},
        tools=[{"type": "function", "function": WEATHER}],
    )
    assert r.message.tool_calls is None or r.message.tool_calls[0].function.name == "get_weather"
    pet = c.chat(
        model=HERMES, messages=[{"role": "user", "content": "A pet."}], format=PET, options={"num_predict": 64}
    )
    jsonschema.validate(json.loads(pet.message.content), PET)
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model=HERMES, messages=[{"role": "user", "content": "x"}], options={"num_ctx": 1 << 20})
    assert err.value.status_code == 400 and "4096" in err.value.error


# ---------------------------------------------------------------- all of them
@pytest.mark.parametrize("api", ["chat", "responses", "messages", "ollama"])
def test_mtp_on_and_off_give_the_same_greedy_reply_through_every_api(agent_served, api):
    url = agent_served[0].url

    def ask(mtp: str) -> str:
        base = {"model": HERMES, "mtp": mtp, "temperature": 0}
        if api == "chat":
            r = httpx.post(
                url + "/v1/chat/completions",
                json={**base, "max_tokens": 24, "messages": [{"role": "user", "content": "Count to five."}]},
                timeout=60,
            )
            return r.json()["choices"][0]["message"]["content"]
        if api == "responses":
            r = httpx.post(
                url + "/v1/responses", json={**base, "max_output_tokens": 24, "input": "Count to five."}, timeout=60
            )
            return r.json()["output"][0]["content"][0]["text"]
        if api == "messages":
            r = httpx.post(
                url + "/v1/messages",
                json={**base, "max_tokens": 24, "messages": [{"role": "user", "content": "Count to five."}]},
                timeout=60,
            )
            return r.json()["content"][0]["text"]
        r = httpx.post(
            url + "/api/chat",
            json={
                **base,
                "stream": False,
                "options": {"num_predict": 24},
                "messages": [{"role": "user", "content": "Count to five."}],
            },
            timeout=60,
        )
        return r.json()["message"]["content"]

    on, off = ask("on"), ask("off")
    assert on and on == off


@pytest.mark.parametrize(
    "path,body,shape",
    [
        ("/v1/responses", {"model": QWEN, "input": 3}, "openai"),
        (
            "/v1/responses",
            {
                "model": QWEN,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
            },
            "openai",
        ),
        ("/v1/responses", {"model": QWEN, "input": "x", "text": {"format": {"type": "xml"}}}, "openai"),
        ("/v1/messages", {"model": QWEN, "max_tokens": 4, "messages": "x"}, "anthropic"),
        (
            "/v1/messages",
            {
                "model": QWEN,
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "sometimes"},
            },
            "anthropic",
        ),
        ("/api/chat", {"model": QWEN, "messages": []}, "ollama"),
        ("/api/chat", {"model": QWEN, "messages": [{"role": "user", "content": "x", "images": ["AA=="]}]}, "ollama"),
        ("/api/generate", {"model": "nope", "prompt": "x"}, "ollama"),
        ("/v1/responses", {"model": QWEN, "input": "x", "reasoning": {"effort": []}}, "openai"),
        ("/api/chat", {"model": QWEN, "think": {}, "messages": [{"role": "user", "content": "x"}]}, "ollama"),
        ("/api/chat", {"model": QWEN, "messages": [{"role": "assistant", "content": "", "tool_calls": 5}]}, "ollama"),
    ],
)
def test_malformed_bodies_are_4xx_in_each_apis_shape(agent_served, path, body, shape):
    r = httpx.post(agent_served[0].url + path, json=body, timeout=30)
    assert 400 <= r.status_code < 500, r.text
    got = r.json()
    if shape == "openai":
        assert isinstance(got["error"]["message"], str) and got["error"]["type"]
    elif shape == "anthropic":
        assert got["type"] == "error" and got["error"]["type"] and got["error"]["message"]
    else:
        assert isinstance(got["error"], str) and got["error"]


def test_api_key_in_x_api_key_or_bearer(agent_served):
    srv = ServerThread(agent_served[1], ServerSettings(port=0, api_key="sekret")).start()
    srv.wait_ready()
    try:
        body = {"model": HERMES, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
        assert (
            httpx.post(srv.url + "/v1/messages", json=body, headers={"x-api-key": "sekret"}, timeout=30).status_code
            == 200
        )
        bad = httpx.post(srv.url + "/v1/messages", json=body, headers={"x-api-key": "nope"}, timeout=30)
        assert bad.status_code == 401 and bad.json()["error"]["type"] == "authentication_error"
        assert httpx.get(srv.url + "/api/tags", headers={"Authorization": "Bearer sekret"}).status_code == 200
        missing = httpx.get(srv.url + "/api/tags")
        assert missing.status_code == 401 and "Missing API key" in missing.json()["error"]  # Ollama's shape
    finally:
        srv.stop()


def test_models_say_their_context_length(agent_served):
    data = httpx.get(agent_served[0].url + "/v1/models").json()["data"]
    assert {m["id"]: m["context_length"] for m in data} == {QWEN: 4096, HERMES: 4096}


def test_a_long_silent_prefill_streams_keep_alives_every_api_can_parse(agent_served, monkeypatch):
    """Clients time out on a long silent prefill: a stream whose first token is late opens
    at once with keep-alives (here made immediate), which each client skips."""
    monkeypatch.setattr(flow_mod, "FIRST_WAIT_S", 0.0)
    monkeypatch.setattr(flow_mod, "PING_INTERVAL_S", 0.0005)
    url = agent_served[0].url

    def body(tag: str) -> dict:  # a prompt no earlier request sent: its prefill takes a while
        text = f"{tag}: " + " ".join(f"item {i} of a long list" for i in range(80))
        return {"model": HERMES, "stream": True, "max_tokens": 16, "messages": [{"role": "user", "content": text}]}

    with httpx.stream("POST", url + "/v1/chat/completions", json=body("chat"), timeout=60) as r:
        raw = b"".join(r.iter_bytes())
    assert b": ping" in raw and raw.rstrip().endswith(b"data: [DONE]")
    with httpx.stream("POST", url + "/v1/messages", json=body("messages"), timeout=60) as r:
        raw = b"".join(r.iter_bytes())
    assert b"event: ping" in raw and b"event: message_stop" in raw


def test_the_ollama_port_serves_the_same_routes(agent_served):
    """`serve --ollama-port`: clients that only look at Ollama's port find the same server."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = ServerThread(agent_served[1], ServerSettings(port=0, ollama_port=port)).start()
    srv.wait_ready()
    try:
        assert srv.ollama_port == port
        tags = httpx.get(f"http://127.0.0.1:{port}/api/tags").json()
        assert {m["name"] for m in tags["models"]} == {QWEN, HERMES}
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200  # every route, both ports
    finally:
        srv.stop()


def test_what_claude_code_really_sends_is_taken(claude):
    """Found running Claude Code 2.1 against the endpoint: system turns between the
    messages (its reminders), ``thinking: adaptive``, and tool schemas with keywords the
    grammar engine does not implement (``propertyNames``) — none of them may be a 400."""
    task = {
        "name": "TaskCreate",
        "description": "Create a task",
        "input_schema": {
            "type": "object",
            "properties": {
                "tags": {
                    "type": "object",
                    "propertyNames": {"pattern": "^[a-z]+$"},
                    "additionalProperties": {"type": "string"},
                }
            },
        },
    }
    m = claude.messages.create(
        model=QWEN,
        max_tokens=24,
        tools=[task],
        thinking={"type": "adaptive"},
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hi."}]},
            {"role": "system", "content": "Reminder: be brief."},
        ],
    )
    assert m.content and m.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_a_stream_gives_its_place_back_whatever_a_client_names_its_tools(agent_served):
    """Tool names go into a response header: one that is not latin-1, or holds a line
    break, must neither break the response nor keep the request's place in the queue."""
    url = agent_served[0].url
    for name in ("\u641c\u7d22", "a\nb"):
        body = {
            "model": HERMES,
            "stream": True,
            "max_tokens": 4,
            "tools": [{"name": name, "type": "web_search_1"}],
            "messages": [{"role": "user", "content": "Hi."}],
        }
        with httpx.stream("POST", url + "/v1/messages", json=body, timeout=60) as r:
            raw = b"".join(r.iter_bytes())
            assert r.status_code == 200 and "\n" not in r.headers["x-mtp-studio-skipped-tools"]
        assert b"message_stop" in raw
    assert agent_served[0]._server.config.app.state.pending == 0  # every request's place given back


def test_a_body_with_nan_is_a_400_not_a_500(agent_served):
    raw = b'{"model": "hermes", "input": "x", "metadata": {"a": NaN}}'
    r = httpx.post(agent_served[0].url + "/v1/responses", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "NaN" in r.json()["error"]["message"]


def test_either_header_may_carry_the_key(agent_served):
    srv = ServerThread(agent_served[1], ServerSettings(port=0, api_key="sekret")).start()
    srv.wait_ready()
    try:
        body = {"model": HERMES, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
        h = {"x-api-key": "sekret", "Authorization": "Basic Zm9vOmJhcg=="}
        assert httpx.post(srv.url + "/v1/messages", json=body, headers=h, timeout=30).status_code == 200
        h = {"x-api-key": "sekret", "Authorization": "Bearer wrong"}
        assert httpx.post(srv.url + "/v1/messages", json=body, headers=h, timeout=30).status_code == 200
    finally:
        srv.stop()


def test_conversions_pair_results_and_reasoning_with_their_turns():
    from engine.server.apis import ollama as ollama_api, responses as responses_api

    msgs = ollama_api._messages(
        [
            {"role": "user", "content": "read both"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "read", "arguments": {"p": "a"}}},
                    {"function": {"name": "read", "arguments": {"p": "b"}}},
                ],
            },
            {"role": "tool", "tool_name": "read", "content": "A"},
            {"role": "tool", "tool_name": "read", "content": "B"},
        ]
    )
    ids = [c["id"] for c in msgs[1]["tool_calls"]]
    assert [m["tool_call_id"] for m in msgs[2:]] == ids and len(set(ids)) == 2
    turns = responses_api.input_messages(
        [
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "R0"}]},
            {"role": "user", "content": "q"},
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "R1"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "R2"}]},
            {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        ]
    )
    assert turns[0] == {"role": "user", "content": "q"}  # R0 preceded no assistant turn: dropped
    assert turns[1]["reasoning_content"] == "R1R2" and [c["id"] for c in turns[1]["tool_calls"]] == ["c1", "c2"]


# ------------------------------------------------------------------ images
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_a_model_without_a_projector_refuses_a_picture_in_each_apis_shape_in_the_same_words(agent_served):
    """A picture sent to a model loaded without a projector: every API that can carry one
    answers a 400 in its own error shape, in one wording that names what to download
    (engine.runtime.decider.no_projector)."""
    url = agent_served[0].url
    said = "was loaded without a projector, so it cannot see images or hear audio: download the model's projector"
    uri = f"data:image/png;base64,{PIXEL}"
    asks = {
        "chat": (
            "/v1/chat/completions",
            {
                "model": HERMES,
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}]}],
            },
            lambda j: j["error"]["message"],
            "messages[0].content[0] is a 'image_url' part",
        ),
        "responses": (
            "/v1/responses",
            {"model": HERMES, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": uri}]}]},
            lambda j: j["error"]["message"],
            "is a 'input_image' part",
        ),
        "messages": (
            "/v1/messages",
            {
                "model": HERMES,
                "max_tokens": 8,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
                        ],
                    }
                ],
            },
            lambda j: j["error"]["message"],
            "is a 'image' block",
        ),
        "ollama chat": (
            "/api/chat",
            {"model": HERMES, "messages": [{"role": "user", "content": "hi", "images": [PIXEL]}]},
            lambda j: j["error"],
            "messages[0].images is a list of images",
        ),
        "ollama generate": (
            "/api/generate",
            {"model": HERMES, "prompt": "hi", "images": [PIXEL]},
            lambda j: j["error"],
            "images is a list of images",
        ),
    }
    for api, (path, body, message, where) in asks.items():
        r = httpx.post(url + path, json=body, timeout=30)
        assert r.status_code == 400, (api, r.text)
        assert said in message(r.json()) and "--mmproj" in message(r.json()), (api, r.text)
        del where
