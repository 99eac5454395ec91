"""OpenAI's Responses API as coding agents speak it (Codex CLI, the openai-agents library),
exercised with the official ``openai`` client against a real server on tiny models carrying
Qwen3.5's and Qwen2.5's real chat templates."""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import pytest

from tests.server.agentapis import ASK, HERMES, PET, QWEN, WEATHER


# ------------------------------------------------------------------ Responses
def test_responses_text_and_the_agents_system_messages_fit_the_template(oai):
    """Codex sends instructions and a developer message before the user's: Qwen3.5's
    template refuses a second system message (llama-server answers 500); here they are
    merged and the reply comes back."""
    r = oai.responses.create(
        model=QWEN,
        instructions="You are a coding agent.",
        max_output_tokens=24,
        reasoning={"effort": "none"},
        input=[
            {"role": "developer", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]},
        ],
    )
    assert r.status in ("completed", "incomplete") and r.output_text
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert [o.type for o in r.output] == ["message"]


def test_responses_stream_follows_openais_event_order(oai):
    with oai.responses.stream(model=QWEN, input=ASK, max_output_tokens=40, reasoning={"effort": "low"}) as s:
        events = list(s)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    # the tiny model rarely ends on its own: cut at max_output_tokens, the response is incomplete
    final = events[-1].response
    assert (kinds[-1], final.status) in (("response.completed", "completed"), ("response.incomplete", "incomplete"))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # every item: added, (part added, deltas, done, part done), done — in output order
    for item_index in range({e.output_index for e in events if hasattr(e, "output_index")}.__len__()):
        mine = [e.type for e in events if getattr(e, "output_index", None) == item_index]
        assert mine[0] == "response.output_item.added" and mine[-1] == "response.output_item.done"
    assert final.output[0].type == "reasoning" and final.output[0].content[0].text  # the template thinks
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "".join(c.text for o in final.output if o.type == "message" for c in o.content)


def test_responses_function_tool_round_trip_and_skipped_tools(oai):
    tools = [
        {"type": "function", **WEATHER},
        {"type": "web_search"},
        {"type": "local_shell"},
        {"type": "custom", "name": "apply_patch"},
    ]
    raw = oai.responses.with_raw_response.create(
        model=QWEN, input=ASK, tools=tools, tool_choice="required", max_output_tokens=240
    )  # the tiny vocabulary spells XML out
    assert raw.headers["x-mtp-studio-skipped-tools"] == "web_search, local_shell, apply_patch"
    r = raw.parse()
    assert r.status == "completed"  # the grammar ends the reply with its call
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and json.loads(calls[0].arguments)["city"] in ("Paris", "Rome")
    follow = [
        *[o.model_dump() for o in r.output],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C"},
    ]
    r2 = oai.responses.create(
        model=QWEN,
        input=[{"role": "user", "content": ASK}, *follow],
        tools=tools,
        max_output_tokens=24,
        reasoning={"effort": "none"},
    )
    assert r2.status in ("completed", "incomplete") and r2.output_text


def test_responses_json_schema_output_is_valid(oai):
    r = oai.responses.create(
        model=HERMES,
        input="A pet as JSON.",
        max_output_tokens=64,
        text={"format": {"type": "json_schema", "name": "pet", "schema": PET, "strict": True}},
    )
    jsonschema.validate(json.loads(r.output_text), PET)


def test_responses_previous_response_id_continues_from_the_store(oai):
    first = oai.responses.create(model=HERMES, input="Name a colour.", max_output_tokens=8)
    second = oai.responses.create(model=HERMES, previous_response_id=first.id, input="Another.", max_output_tokens=8)
    assert second.previous_response_id == first.id
    # the stored conversation renders to the prefix the context already holds
    assert second.usage.input_tokens_details.cached_tokens > first.usage.input_tokens // 2
    assert oai.responses.retrieve(first.id).id == first.id
    oai.responses.delete(first.id)
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        oai.responses.retrieve(first.id)
    with pytest.raises(NotFoundError):
        oai.responses.create(model=HERMES, previous_response_id=first.id, input="x", max_output_tokens=4)


def test_openai_agents_calls_a_tool_through_the_responses_api(agent_served):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, RunConfig, Runner, function_tool
    from openai import AsyncOpenAI

    seen = []

    @function_tool
    def get_weather(city: Literal["Paris", "Rome"]) -> str:
        """The weather in a city."""
        seen.append(city)
        return "Sunny"

    client = AsyncOpenAI(base_url=agent_served[0].url + "/v1", api_key="unused", max_retries=0)
    model = OpenAIResponsesModel(model=QWEN, openai_client=client)
    # the tool's answer is the agent's: the tiny model would otherwise write on to max_tokens,
    # which the SDK rightly takes as an incomplete response
    agent = Agent(
        name="w",
        instructions="Use the tool.",
        tools=[get_weather],
        model=model,
        tool_use_behavior="stop_on_first_tool",
        model_settings=ModelSettings(tool_choice="required", max_tokens=240),
    )
    result = Runner.run_sync(agent, ASK, max_turns=3, run_config=RunConfig(tracing_disabled=True))
    assert seen and seen[0] in ("Paris", "Rome"), "the agent never called its tool"
    assert result.final_output == "Sunny"


def test_a_streamed_function_call_follows_openais_events(oai):
    tools = [{"type": "function", **WEATHER}]
    with oai.responses.stream(
        model=HERMES, input=ASK, tools=tools, tool_choice="required", parallel_tool_calls=False, max_output_tokens=240
    ) as s:  # one call, then the grammar ends the reply
        events = list(s)
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call")
    i = added.output_index
    mine = [e.type for e in events if getattr(e, "output_index", None) == i]
    assert mine[0] == "response.output_item.added" and mine[-1] == "response.output_item.done"
    assert "response.function_call_arguments.delta" in mine and "response.function_call_arguments.done" in mine
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    # the arguments arrive as they are written, in pieces before the call is done (as many as
    # the stream's pauses cut them into: on the fast demo often one; tests/server/test_bridge.py)
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas and "".join(deltas) == done.arguments
    assert json.loads(done.arguments)["city"] in ("Paris", "Rome") and kinds[-1] == "response.completed"
