"""Hy3's calls, ``<tool_calls:opensource>`` … ``<arg_key:opensource>K</arg_key:opensource>`` …:
through the real template and back, recorded replies whole and streamed, malformed ones,
and the grammar driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.paramcalls.hy3 import HY3
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, demo_vocab, drive, pairs, render, templates
from tests.callharness import TRIP_CALLS as CALLS, TRIP_TOOLS as TOOLS, trip_conversation

TEMPLATE = "tencent-Hy3.jinja"


def test_calls_round_trip_through_the_real_template():
    messages = trip_conversation(CALLS)
    text = render(templates()[TEMPLATE], messages, tools=[t.to_template() for t in TOOLS], add_generation_prompt=False)
    turn = text[text.index("plan a trip.") :]  # the tools' description shows the syntax too
    i = HY3.find(turn)
    calls, end = HY3.scan(turn[i:], TOOLS)
    assert i >= 0 and pairs(calls) == CALLS
    assert turn[i + end :].startswith("<｜hy_eos:opensource｜>")  # the block's end marker is the calls'
    assert HY3.write(CALLS) in turn  # written exactly as the template renders them
    assert pairs(HY3.parse(HY3.write(CALLS), TOOLS)) == CALLS


def test_detects_its_own_template_only():
    assert [n for n, src in templates().items() if HY3.detects(src)] == [TEMPLATE]


RECORDED = {
    "two calls": "Let me check.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
    '<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>São Paulo "Centro"\nzona 1 ☀'
    "</arg_value:opensource>\n<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>3"
    "</arg_value:opensource>\n<arg_key:opensource>unit</arg_key:opensource>\n<arg_value:opensource>"
    "celsius</arg_value:opensource>\n</tool_call:opensource>\n<tool_call:opensource>plan_trip"
    "<tool_sep:opensource>\n<arg_key:opensource>stops</arg_key:opensource>\n<arg_value:opensource>"
    '[{"city": "Rome", "nights": 2}, {"city": "Oslo"}]</arg_value:opensource>\n<arg_key:opensource>'
    'options</arg_key:opensource>\n<arg_value:opensource>{"by": "train", "budget": {"max": 900}}'
    "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
    "compact": "<tool_calls:opensource><tool_call:opensource>get_weather<tool_sep:opensource><arg_key:opensource>city"
    "</arg_key:opensource><arg_value:opensource>Zürich</arg_value:opensource></tool_call:opensource>"
    "</tool_calls:opensource>",
    "no arguments": "<tool_calls:opensource>\n<tool_call:opensource>plan_trip<tool_sep:opensource>\n"
    "</tool_call:opensource>\n</tool_calls:opensource>",
}
WANT = {
    "two calls": [
        ("get_weather", {"city": 'São Paulo "Centro"\nzona 1 ☀', "days": 3, "unit": "celsius"}),
        (
            "plan_trip",
            {
                "stops": [{"city": "Rome", "nights": 2}, {"city": "Oslo"}],
                "options": {"by": "train", "budget": {"max": 900}},
            },
        ),
    ],
    "compact": [("get_weather", {"city": "Zürich"})],
    "no arguments": [("plan_trip", {})],
}


@pytest.mark.parametrize("case", list(RECORDED))
def test_recorded_replies_parse_whole_and_streamed(case):
    text = RECORDED[case]
    reply = split(text, fmt=HY3, tools=TOOLS)
    assert pairs(reply.calls) == WANT[case] and reply.content in ("", "Let me check.")
    calls, end = HY3.scan(text[HY3.find(text) :], TOOLS)
    assert text[HY3.find(text) + end :] == ""  # the block's end marker is the calls'
    check_stream(text, HY3, TOOLS)


def test_malformed_replies_lose_nothing():
    text = RECORDED["two calls"]
    # cut inside the second call's name: the first call, then the rest as content
    cut = text[: text.index("plan_trip") + 4]
    reply = split(cut, fmt=HY3, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1]
    assert reply.content == "Let me check.<tool_call:opensource>plan"
    check_stream(cut, HY3, TOOLS)
    # cut inside a value: the call is delivered as far as it was written
    cut = text[: text.index("zona")]
    (call,) = split(cut, fmt=HY3, tools=TOOLS).calls
    assert call.name == "get_weather" and call.arguments == '{"city": "São Paulo \\"Centro\\"\\n'
    # no end marker for the block: the calls all the same
    open_block = text[: text.index("</tool_calls:opensource>")]
    assert pairs(split(open_block, fmt=HY3, tools=TOOLS).calls) == WANT["two calls"]
    check_stream(open_block, HY3, TOOLS)
    # a wrong closing marker: the call closes there, the rest is content
    wrong = text.replace("</tool_call:opensource>", "</tool_call>", 1)
    reply = split(wrong, fmt=HY3, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1]
    assert reply.content.startswith("Let me check.</tool_call>\n<tool_call:opensource>plan_trip")
    check_stream(wrong, HY3, TOOLS)
    # a call outside a block, garbage after the opener, JSON arguments: content
    for bad in (
        "<tool_call:opensource>get_weather<tool_sep:opensource>\n</tool_call:opensource>",
        "Hmm. <tool_calls:opensource> this is not a call",
        '<tool_calls:opensource><tool_call:opensource>get_weather<tool_sep:opensource>{"city": "Rome"}'
        "</tool_call:opensource></tool_calls:opensource>",
        "<tool_calls:opensource><tool_call:opensource>get weather<tool_sep:opensource>",
    ):
        reply = split(bad, fmt=HY3, tools=TOOLS)
        assert reply.calls == [] and reply.content.replace(" ", "") == bad.replace(" ", ""), bad
        check_stream(bad, HY3, TOOLS)


# ---------------------------------------------------------------- grammar, token by token
PICK = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "pick",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "mode": {"type": "string", "enum": ["fast", "slow"]},
                        "n": {"type": "integer", "minimum": 0, "maximum": 9},
                        "note": {"type": "string", "maxLength": 12},
                    },
                    "required": ["mode", "n"],
                },
            },
        }
    ]
)


@pytest.fixture(scope="module")
def vocab():
    return demo_vocab()


def _valid(calls) -> None:
    assert calls
    for c in calls:
        args = json.loads(c.arguments)
        assert c.name == "pick" and set(args) <= {"mode", "n", "note"}, args
        assert args["mode"] in ("fast", "slow") and type(args["n"]) is int and 0 <= args["n"] <= 9, args
        assert isinstance(args.get("note", ""), str) and len(args.get("note", "")) <= 12, args


def test_required_calls_are_valid_for_the_schema(vocab):
    for parallel in (True, False):
        spec = reply_grammar(lit=vocab[2], fmt=HY3, tools=PICK, choice=ToolChoice("required"), parallel=parallel)
        for seed in range(3):
            text = drive(vocab, spec, "", 400, seed)
            reply = split(text, fmt=HY3, tools=PICK)
            _valid(reply.calls)
            assert reply.content == "" and (parallel or len(reply.calls) == 1), text
            assert text.rstrip().endswith("</tool_calls:opensource>")


def test_auto_calls_are_forced_valid_once_opened(vocab):
    spec = reply_grammar(lit=vocab[2], fmt=HY3, tools=PICK, choice=ToolChoice("auto"))
    assert HY3.trigger not in drive(vocab, spec, "", 40)
    text = drive(vocab, spec, "Sure. " + HY3.trigger, 400)
    reply = split(text, fmt=HY3, tools=PICK)
    _valid(reply.calls)
    assert reply.content == "Sure."


def test_the_grammar_takes_markers_that_are_special_tokens(vocab):
    """In Hy3's own vocabulary the markers are control tokens (rendering as no text): a
    string value is then free text up to the end-of-value token."""
    special = {HY3.VALUE_END: "<[1]>"}
    lit = lambda s: special.get(s) or vocab[2](s)  # noqa: E731
    spec = reply_grammar(lit=lit, fmt=HY3, tools=PICK, choice=ToolChoice("required"))
    for seed in range(2):
        assert drive(vocab, spec, "", 120, seed).startswith(HY3.trigger)
