"""The Cohere call family (Command R7B, Cohere2 MoE) beyond the contract every format keeps
(test_contract.py): the plan the model writes before its calls, in the template's thinking
markers."""

from __future__ import annotations

from engine.runtime.prompt.calls.jsoncalls.cohere import COHERE, THINKING
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import split
from tests.callharness import DESCRIBED_TRIP_TOOLS, check_stream, pairs
from tests.engine.runtime.calls.families_json import CO_ONE, QUOTED


def test_a_plan_written_as_thinking_is_reasoning_and_the_calls_follow():
    """The plan in <|START_THINKING|> … <|END_THINKING|> is reasoning, then the calls; fed
    in pieces it splits the same."""
    think = Thinking(*THINKING)
    planned = "<|START_THINKING|>I will look up the weather.<|END_THINKING|>" + CO_ONE
    r = split(planned, think, False, COHERE, DESCRIBED_TRIP_TOOLS)
    assert (r.reasoning, r.content, pairs(r.calls)) == ("I will look up the weather.", "", [("get_weather", QUOTED)])
    check_stream(planned, COHERE, DESCRIBED_TRIP_TOOLS, thinking=think)
