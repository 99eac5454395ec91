"""Tool calls and reasoning through the endpoint, with the official ``openai`` client and
pydantic-ai, on a tiny model carrying Qwen3.5-4B's real chat template (thinking + XML
calls; the template is fetched with the vendored corpus, tests.realtemplates)."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import pytest
from pydantic import Field

from engine.runtime.engine import EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.server.settings import ServerSettings
from tests.server.serving import serving

MODEL = "qwen35-template"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"],
        },
    },
}
#: tokens "</think>" takes in the fixture's small vocabulary (real Qwen: one), counted as thinking
END_MARKER = 8
ASK = [{"role": "user", "content": "What is the weather in Paris for the next three days?"}]
#: the server's default reply length
MAX_TOKENS = 240


@pytest.fixture(scope="module")
def served(qwen35_template_model):
    spec = LoadSpec(qwen35_template_model, mtp=MtpSource.INTEGRATED, n_ctx=4096, name=MODEL)
    settings = ServerSettings(port=0, max_tokens=MAX_TOKENS, thinking_budget=12)
    with serving([spec], settings, EngineConfig(request=Defaults(draft_depth=2))) as served:
        yield served


@pytest.fixture
def client(served):
    from openai import OpenAI

    with OpenAI(base_url=served[0].url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def _args(call) -> dict:
    return json.loads(call.function.arguments)


def test_model_info_says_it_thinks_and_calls_in_xml(served):
    info = served[1].models()[MODEL]
    assert info.thinks and info.think_toggle and info.tool_format == "qwen-xml"


def test_required_tool_call_is_valid_and_shaped_like_openai(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER, CLOCK], tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    msg = choice.message
    assert msg.content is None and msg.tool_calls
    for call in msg.tool_calls:
        assert call.id.startswith("call_") and call.type == "function"
        if call.function.name == "get_weather":
            a = _args(call)
            assert a["city"] in ("Paris", "Rome", "Oslo") and 1 <= a["days"] <= 7
        else:
            assert call.function.name == "get_time" and _args(call)["zone"] in ("UTC", "CET")
    # the thinking came first, within the budget, and stayed out of the content
    assert msg.model_extra.get("reasoning_content")
    assert r.model_extra["timings"]["thinking"]["predicted_n"] <= 12 + END_MARKER


def test_named_tool_choice_calls_that_tool(client):
    for tool in (WEATHER, CLOCK):
        name = tool["function"]["name"]
        r = client.chat.completions.create(
            model=MODEL,
            messages=ASK,
            tools=[WEATHER, CLOCK],
            tool_choice={"type": "function", "function": {"name": name}},
        )
        assert {c.function.name for c in r.choices[0].message.tool_calls} == {name}


def test_parallel_tool_calls_false_makes_one_call(client):
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=False
    )
    assert len(r.choices[0].message.tool_calls) == 1


def test_auto_and_none_answer_without_a_500(client):
    """Greedy, the fixture's model never opens a call on ASK: under auto (the call grammar
    waits for a call's opening marker) as under none it writes text until the server's
    max_tokens, so both answer in content and end "length"."""
    for choice in ("auto", "none"):
        r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice=choice)
        c = r.choices[0]
        assert (c.finish_reason, r.usage.completion_tokens) == ("length", MAX_TOKENS), choice
        assert not c.message.tool_calls and c.message.content, choice
        if choice == "auto":  # no call markup leaks into the content
            assert "<tool_call>" not in c.message.content and "<function=" not in c.message.content


def test_streamed_calls_send_id_and_name_first_then_arguments(client):
    kw = dict(model=MODEL, messages=ASK, tools=[WEATHER, CLOCK], tool_choice="required")
    whole = client.chat.completions.create(**kw).choices[0].message
    calls: dict[int, dict] = {}
    reasoning, finish = "", None
    for chunk in client.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        assert not d.content or not d.content.strip(), "a call must not leak into the content"
        for tc in d.tool_calls or []:
            if tc.index not in calls:  # the first fragment of a call names it
                assert tc.id and tc.function.name
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or ""}
            else:
                assert tc.id is None and not tc.function.name
                calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (c.function.name, _args(c)) for c in whole.tool_calls
    ]
    assert reasoning == whole.model_extra["reasoning_content"]


def test_a_tool_result_round_trip(client):
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required")
    assert first.choices[0].finish_reason == "tool_calls"
    msg = first.choices[0].message
    history = [*ASK, msg.model_dump(exclude_none=True)]
    for call in msg.tool_calls:
        history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21, "sky": "clear"})})
    second = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    # auto (the default with tools), greedy: the model answers the result in text, no second
    # call, until the server's max_tokens
    answer = second.choices[0]
    assert (answer.finish_reason, second.usage.completion_tokens) == ("length", MAX_TOKENS)
    assert not answer.message.tool_calls and answer.message.content


def test_bad_tool_requests_are_400_with_words(client):
    import openai

    with pytest.raises(openai.BadRequestError, match="not among the tools"):
        client.chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "launch"}}
        )
    with pytest.raises(openai.BadRequestError, match="no assistant message before it"):
        client.chat.completions.create(
            model=MODEL, messages=[*ASK, {"role": "tool", "tool_call_id": "x", "content": "1"}]
        )
    bad = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": 7}}}},
    }
    with pytest.raises(openai.BadRequestError, match="not a usable JSON schema"):
        client.chat.completions.create(model=MODEL, messages=ASK, tools=[bad])
    with pytest.raises(openai.BadRequestError, match="needs 'tools'"):
        client.chat.completions.create(model=MODEL, messages=ASK, tool_choice="required")


def test_reasoning_is_split_budgeted_and_can_be_turned_off_or_left_raw(client):
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=40, extra_body={"thinking_budget_tokens": 6}
    )
    m = r.choices[0].message
    assert (
        m.model_extra["reasoning_content"]
        and "<think>" not in (m.content or "")
        and "</think>" not in (m.content or "")
    )
    t = r.model_extra["timings"]
    assert 1 <= t["thinking"]["predicted_n"] <= 6 + END_MARKER and t["answer"]["predicted_n"] > 0
    raw = client.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=40, extra_body={"thinking_budget_tokens": 6, "reasoning_format": "none"}
    )
    assert "</think>" in raw.choices[0].message.content and not raw.choices[0].message.model_extra.get(
        "reasoning_content"
    )
    assert raw.choices[0].message.content.split("</think>", 1)[1].strip() == m.content.strip()
    off = client.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=20, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    assert not off.choices[0].message.model_extra.get("reasoning_content") and off.choices[0].message.content
    assert off.model_extra["timings"]["thinking"]["predicted_n"] == 0


def test_json_output_applies_after_the_thinking(client):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        max_tokens=120,
        extra_body={"thinking_budget_tokens": 5},
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    )
    m = r.choices[0].message
    assert m.model_extra["reasoning_content"] and isinstance(json.loads(m.content)["ok"], bool)


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_speculation_changes_nothing_in_thinking_content_or_calls(client, choice):
    kw = dict(model=MODEL, messages=ASK, tools=[WEATHER, CLOCK], tool_choice=choice, max_tokens=80)
    off = client.chat.completions.create(**kw, extra_body={"mtp": "off"})
    on = client.chat.completions.create(**kw, extra_body={"mtp": "on", "draft_depth": 3})
    a, b = off.choices[0].message, on.choices[0].message
    assert (a.content, a.model_extra.get("reasoning_content")) == (b.content, b.model_extra.get("reasoning_content"))
    assert [(c.function.name, c.function.arguments) for c in a.tool_calls or []] == [
        (c.function.name, c.function.arguments) for c in b.tool_calls or []
    ]
    t = on.model_extra["timings"]
    assert t["speculative"] and t["thinking"]["draft_n"] + t["answer"]["draft_n"] == t["draft_n"]


def test_pydantic_ai_agent_completes_a_tool_loop(served):
    """pydantic-ai's chat-completions model: the agent calls the tool (tool_choice
    required: its output is a tool too), runs it, sends the result back, and ends with
    its output tool. Each step offers one tool, so the loop's order is fixed."""
    from pydantic_ai import Agent, ToolOutput
    from pydantic_ai.capabilities import PrepareOutputTools
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.tools import RunContext, ToolDefinition

    calls: list[dict] = []

    async def until_called(ctx: RunContext, tool: ToolDefinition) -> ToolDefinition | None:
        return None if calls else tool

    async def after_called(ctx: RunContext, tools: list[ToolDefinition]) -> list[ToolDefinition]:
        return tools if calls else []

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=served[0].url + "/v1", api_key="unused"))
    agent = Agent(
        model,
        output_type=ToolOutput(bool, name="final_result"),
        model_settings={"max_tokens": 300},
        capabilities=[PrepareOutputTools(after_called)],
    )

    @agent.tool_plain(prepare=until_called)
    def get_weather(city: Literal["Paris", "Rome"], days: Annotated[int, Field(ge=1, le=7)]) -> str:
        """The weather in a city."""
        calls.append({"city": city, "days": days})
        return f"{city}: sunny for {days} days"

    result = agent.run_sync("Is it sunny in Paris?")
    assert len(calls) == 1 and calls[0]["city"] in ("Paris", "Rome") and 1 <= calls[0]["days"] <= 7
    assert isinstance(result.output, bool)
    kinds = [type(p).__name__ for m in result.all_messages() for p in m.parts]
    assert kinds.count("ToolReturnPart") >= 1 and "ToolCallPart" in kinds


def test_a_system_message_mid_conversation_is_not_a_400(client):
    """pydantic-ai retries with a system message after the assistant's turn; Qwen3.5's
    template refuses those, so it is given as a user turn."""
    history = [
        *ASK,
        {"role": "assistant", "content": "Let me see."},
        {"role": "system", "content": "Please include your response in a tool call."},
    ]
    r = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], tool_choice="required")
    assert r.choices[0].message.tool_calls
