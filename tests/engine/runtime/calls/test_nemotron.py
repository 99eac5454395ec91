"""Nemotron Nano v2's calls, ``<TOOLCALL>[{"name": NAME, "arguments": {...}}, …]</TOOLCALL>``:
through its real template, recorded and malformed replies streamed, and its grammar driven
by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.jsoncalls.nemotron import NEMOTRON as FMT
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, drive, pairs, render, streamed, templates
from tests.callharness import TRAVEL_CALLS as CALLS, TRAVEL_TOOLS as TOOLS, travel_conversation as conversation

MINE = ("NVIDIA-Nemotron-Nano-v2.jinja",)


@pytest.mark.parametrize("name", MINE)
def test_the_templates_calls_parse_back_to_the_calls_put_in(name):
    source = templates()[name]
    text = render(source, conversation(CALLS), tools=[t.to_template() for t in TOOLS], add_generation_prompt=False)
    # the system prompt shows the format (with doubled braces): the calls are in the assistant's turn
    turn = text.index("<SPECIAL_11>Assistant")
    assert not FMT.scan(text[FMT.find(text) :], TOOLS)[0] and FMT.find(text) < turn
    i = turn + FMT.find(text[turn:])
    assert i >= turn, text
    calls, end = FMT.scan(text[i:], TOOLS)
    assert pairs(calls) == CALLS and text[i:].startswith(FMT.write(CALLS))
    assert pairs(FMT.parse(FMT.write(CALLS), TOOLS)) == CALLS


def test_only_nemotron_nano_v2_is_detected():
    got = {name for name, source in templates().items() if FMT.detects(source)}
    assert got == set(MINE)


RECORDED = [
    (
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3, "unit": "celsius"}}, '
        '{"name": "note", "arguments": {"text": "He said \\"hi\\",\\nthen: Zürich — 東京 ☀"}}]</TOOLCALL>',
        "",
        [
            ("get_weather", {"city": "San Francisco", "days": 3, "unit": "celsius"}),
            ("note", {"text": 'He said "hi",\nthen: Zürich — 東京 ☀'}),
        ],
    ),
    (
        'Let me plan.\n<TOOLCALL>[{"name":"plan","arguments":{"stops":[{"city":"Rome","nights":2}],'
        '"options":{"rail":false,"budget":10}}}]</TOOLCALL>',
        "Let me plan.",
        [("plan", {"stops": [{"city": "Rome", "nights": 2}], "options": {"rail": False, "budget": 10}})],
    ),
]


@pytest.mark.parametrize("text,content,calls", RECORDED)
def test_recorded_replies_split_and_stream(text, content, calls):
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, FMT, TOOLS)


def test_a_reply_after_thinking_and_arguments_as_a_json_string():
    # the generation prompt opens <think>; the template's instructions show "arguments" as a string
    text = (
        'The user wants weather.</think>\n\n<TOOLCALL>[{"name": "get_weather", "arguments": '
        '"{\\"city\\": \\"Oslo\\"}"}]</TOOLCALL>'
    )
    r = split(text, Thinking(), True, FMT, TOOLS)
    want = ("The user wants weather.", "", [("get_weather", {"city": "Oslo"})])
    assert (r.reasoning, r.content, pairs(r.calls)) == want
    check_stream(text, FMT, TOOLS, Thinking(), True, grows=False)


MALFORMED = [
    # another family's markers: content
    (
        'I would call <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        'I would call <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        [],
    ),
    # garbage after the opener: content
    ("Sure <TOOLCALL>this is not a call", "Sure <TOOLCALL>this is not a call", []),
    ('<TOOLCALL>{"name": "get_weather"}</TOOLCALL>', '<TOOLCALL>{"name": "get_weather"}</TOOLCALL>', []),
    # cut in the name: content
    ('Checking <TOOLCALL>[{"name": "get_wea', 'Checking <TOOLCALL>[{"name": "get_wea', []),
    # the list left open: the calls
    ('<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}', "", [("get_weather", {"city": "Paris"})]),
]


@pytest.mark.parametrize("text,content,calls", MALFORMED)
def test_malformed_replies_lose_nothing(text, content, calls):
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, FMT, TOOLS)


BAD_ARGS = '<TOOLCALL>[{"name": "get_weather", "arguments": [1, 2]}]</TOOLCALL>'


def test_arguments_that_are_not_an_object_are_content():
    """A call named, then arguments that are not an object: the call ends there with empty
    arguments (it may already have been streamed: nothing is taken back) and the text that
    is not arguments is content (nothing is lost)."""
    r = split(BAD_ARGS, fmt=FMT, tools=TOOLS)
    assert [(c.name, c.arguments) for c in r.calls] == [("get_weather", "{}")]
    assert r.content and BAD_ARGS.endswith(r.content) and "get_weather" not in r.content


def test_arguments_that_are_not_an_object_stream_as_they_split():
    check_stream(BAD_ARGS, FMT, TOOLS)


def test_a_reply_cut_in_the_arguments_keeps_them_as_far_as_written():
    text = 'Checking.<TOOLCALL>[{"name": "get_weather", "arguments": {"days":3,"city":"San Fr'
    r = split(text, fmt=FMT, tools=TOOLS)
    want = ("Checking.", [("get_weather", '{"days": 3, "city": "San Fr')])
    assert (r.content, [(c.name, c.arguments) for c in r.calls]) == want
    for size in (1, 3, 7):
        _, got = streamed(text, FMT, TOOLS, size=size)
        assert (got.content, [(c.name, c.arguments) for c in got.calls]) == want


# ------------------------------------------------------------------- grammar
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
                        "n": {"type": "integer", "minimum": 1, "maximum": 5},
                        "why": {"type": "string", "maxLength": 12},
                    },
                    "required": ["mode", "n"],
                },
            },
        }
    ]
)


@pytest.fixture(scope="module")
def vocab():
    from tests.callharness import demo_vocab

    return demo_vocab()


def valid_picks(text: str) -> list[dict]:
    r = split(text, fmt=FMT, tools=PICK)
    assert r.calls, text
    out = []
    for c in r.calls:
        a = json.loads(c.arguments)
        assert c.name == "pick" and set(a) <= {"mode", "n", "why"}, text
        assert a["mode"] in ("fast", "slow") and type(a["n"]) is int and 1 <= a["n"] <= 5, text
        assert isinstance(a.get("why", ""), str) and len(a.get("why", "")) <= 12, text
        out.append(a)
    return out


def grammar(vocab, choice="required", parallel=True):
    from engine.runtime.prompt.replygrammar import reply_grammar

    return reply_grammar(lit=vocab[2], fmt=FMT, tools=PICK, choice=ToolChoice(choice), parallel=parallel)


@pytest.mark.parametrize("seed", range(4))
def test_the_grammar_writes_valid_calls(vocab, seed):
    text = drive(vocab, grammar(vocab), "", 400, seed)
    valid_picks(text)
    assert text.rstrip().endswith(FMT.CLOSE)
    assert len(valid_picks(drive(vocab, grammar(vocab, parallel=False), "", 400, seed))) == 1


def test_auto_calls_are_free_until_the_opener_then_valid(vocab):
    valid_picks(drive(vocab, grammar(vocab, choice="auto"), "Sure. " + FMT.trigger, 400, 1))
