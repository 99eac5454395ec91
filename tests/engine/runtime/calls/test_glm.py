"""GLM's calls, ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``
(GLM-4.5/4.6, GLM-4.7, Ling 3): through the real templates and back, recorded replies whole
and streamed, malformed ones, and the grammar driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.paramcalls.glm import GLM, GLM47, LING
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, demo_vocab, drive, pairs, render, templates
from tests.callharness import TRIP_CALLS as CALLS, TRIP_TOOLS as TOOLS, trip_conversation as _conversation

#: each format and its templates
#: the templates that write each layout (Spark 2.5 and poolside's Laguna write GLM's markers too)
FAMILY = {
    GLM: ["GLM-4.6.jinja", "poolside-Laguna-XS-2.1.jinja", "poolside-Laguna-XS.2.jinja"],
    GLM47: ["GLM-4.7-Flash.jinja", "Spark2.5.jinja", "poolside-Laguna-S-2.1.jinja"],
    LING: ["inclusionai-ling-3.0-flash.jinja"],
}
FORMATS = list(FAMILY)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_calls_round_trip_through_the_real_template(fmt):
    srcs = templates()
    for name in FAMILY[fmt]:
        text = render(
            srcs[name], _conversation(CALLS), tools=[t.to_template() for t in TOOLS], add_generation_prompt=False
        )
        turn = text[text.index("plan a trip.") :]  # the tools' description shows the syntax too
        i = fmt.find(turn)
        calls, end = fmt.scan(turn[i:], TOOLS)
        assert i >= 0 and pairs(calls) == CALLS, name
        assert fmt.write(CALLS) in turn  # written exactly as the template renders them
    assert pairs(fmt.parse(fmt.write(CALLS), TOOLS)) == CALLS


def test_each_format_detects_its_own_templates_only():
    srcs = templates()
    for fmt, names in FAMILY.items():
        assert sorted(n for n, src in srcs.items() if fmt.detects(src)) == sorted(names), fmt.name


RECORDED = {
    # GLM-4.6's whitespace; a string with quotes, a newline and unicode, an integer, an enum
    "two calls": 'Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>São Paulo "Centro"\n'
    "zona 1 ☀</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>unit</arg_key>\n"
    "<arg_value>celsius</arg_value>\n</tool_call>\n<tool_call>plan_trip\n<arg_key>stops</arg_key>\n"
    '<arg_value>[{"city": "Rome", "nights": 2}, {"city": "Oslo"}]</arg_value>\n'
    '<arg_key>options</arg_key>\n<arg_value>{"by": "train", "budget": {"max": 900}}</arg_value>\n'
    "</tool_call>",
    # GLM-4.7's: no whitespace at all
    "compact": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich</arg_value><arg_key>days</arg_key>"
    "<arg_value>10</arg_value></tool_call>",
    # Ling's: a newline before <arg_value> and </tool_call>, none between arguments
    "ling": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value><arg_key>unit</arg_key>\n"
    "<arg_value>fahrenheit</arg_value>\n</tool_call>",
    "no arguments": "<tool_call>plan_trip\n</tool_call>",
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
    "compact": [("get_weather", {"city": "Zürich", "days": 10})],
    "ling": [("get_weather", {"city": "Tokyo", "unit": "fahrenheit"})],
    "no arguments": [("plan_trip", {})],
}


@pytest.mark.parametrize("case", list(RECORDED))
def test_recorded_replies_parse_whole_and_streamed(case):
    text = RECORDED[case]
    for fmt in FORMATS:
        reply = split(text, fmt=fmt, tools=TOOLS)
        assert pairs(reply.calls) == WANT[case] and reply.content in ("", "Let me check.")
        check_stream(text, fmt, TOOLS)


def test_a_string_parameter_is_taken_as_written_and_others_are_json():
    text = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>42</arg_value><arg_key>days</arg_key><arg_value> 42 </arg_value></tool_call>"  # noqa: E501
    (call,) = split(text, fmt=GLM, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": "42", "days": 42}
    # a tool not offered: every value that is JSON is JSON
    (call,) = split(text.replace("get_weather", "other"), fmt=GLM, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": 42, "days": 42}


def test_malformed_replies_lose_nothing():
    text = RECORDED["two calls"]
    # cut inside the second call's name: the first call, then the rest as content
    cut = text[: text.index("plan_trip") + 4]
    reply = split(cut, fmt=GLM, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1] and reply.content == "Let me check.<tool_call>plan"
    check_stream(cut, GLM, TOOLS)
    # cut inside a value: the call is delivered as far as it was written
    cut = text[: text.index("zona")]
    (call,) = split(cut, fmt=GLM, tools=TOOLS).calls
    assert call.name == "get_weather" and call.arguments == '{"city": "São Paulo \\"Centro\\"\\n'
    # a wrong closing marker: the call closes there, the rest is content
    wrong = text.replace("</tool_call>", "</tool_cal>", 1)
    reply = split(wrong, fmt=GLM, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1]
    assert reply.content.startswith("Let me check.</tool_cal>\n<tool_call>plan_trip")
    check_stream(wrong, GLM, TOOLS)
    # a missing closing marker: the next call's opener closes the call
    missing = text.replace("</tool_call>\n", "", 1)
    assert pairs(split(missing, fmt=GLM, tools=TOOLS).calls) == WANT["two calls"]
    check_stream(missing, GLM, TOOLS)
    # a key with no value: the call closes before it
    novalue = RECORDED["compact"].replace("<arg_value>10", "10")
    reply = split(novalue, fmt=GLM, tools=TOOLS)
    assert pairs(reply.calls) == [("get_weather", {"city": "Zürich"})]
    assert reply.content == "<arg_key>days</arg_key>10</arg_value></tool_call>"
    check_stream(novalue, GLM, TOOLS)
    # garbage after the opener, and Hermes JSON where GLM's arguments belong: content
    for bad in (
        "Hmm. <tool_call> this is not a call",
        '<tool_call>get_weather {"city": "Rome"}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
        "<tool_call>get_weather<b>x</b>",
    ):
        reply = split(bad, fmt=GLM, tools=TOOLS)
        assert reply.calls == [] and reply.content.replace(" ", "") == bad.replace(" ", ""), bad
        check_stream(bad, GLM, TOOLS)


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


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_required_calls_are_valid_for_the_schema(vocab, fmt):
    for parallel in (True, False):
        spec = reply_grammar(lit=vocab[2], fmt=fmt, tools=PICK, choice=ToolChoice("required"), parallel=parallel)
        for seed in range(3):
            text = drive(vocab, spec, "", 400, seed)
            reply = split(text, fmt=fmt, tools=PICK)
            _valid(reply.calls)
            assert reply.content == "" and (parallel or len(reply.calls) == 1), text


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_auto_calls_are_forced_valid_once_opened(vocab, fmt):
    spec = reply_grammar(lit=vocab[2], fmt=fmt, tools=PICK, choice=ToolChoice("auto"))
    assert fmt.trigger not in drive(vocab, spec, "", 40)
    text = drive(vocab, spec, "Sure. " + fmt.trigger, 400)
    reply = split(text, fmt=fmt, tools=PICK)
    _valid(reply.calls)
    assert reply.content == "Sure."


def test_the_grammar_takes_markers_that_are_special_tokens(vocab):
    """In GLM's own vocabulary the markers are control tokens (rendering as no text): a
    string value is then free text up to the end-of-value token."""
    special = {"</arg_value>": "<[1]>"}
    lit = lambda s: special.get(s) or vocab[2](s)  # noqa: E731
    spec = reply_grammar(lit=lit, fmt=GLM, tools=PICK, choice=ToolChoice("required"))
    for seed in range(2):
        assert drive(vocab, spec, "", 120, seed).startswith(GLM.trigger)
