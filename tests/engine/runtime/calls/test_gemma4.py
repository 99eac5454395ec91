"""Gemma 4's calls, ``<|tool_call>call:NAME{k:<|"|>v<|"|>,n:3}<tool_call|>``: through its real
templates, recorded and malformed replies streamed, and its grammar driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.paramcalls.gemma4 import GEMMA4 as FMT
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, drive, pairs, render, streamed, templates
from tests.callharness import TRAVEL_CALLS as CALLS, TRAVEL_TOOLS as TOOLS, travel_conversation as conversation

MINE = ("google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja")
Q = '<|"|>'


@pytest.mark.parametrize("name", MINE)
def test_the_templates_calls_parse_back_to_the_calls_put_in(name):
    source = templates()[name]
    text = render(source, conversation(CALLS), tools=[t.to_template() for t in TOOLS], add_generation_prompt=False)
    i = FMT.find(text)
    assert i >= 0, text
    calls, end = FMT.scan(text[i:], TOOLS)
    assert pairs(calls) == CALLS
    assert FMT.write(CALLS) in text  # written as the template writes an assistant's calls
    assert pairs(FMT.parse(FMT.write(CALLS), TOOLS)) == CALLS


def test_only_gemma_4_templates_are_detected():
    got = {name for name, source in templates().items() if FMT.detects(source)}
    assert got == set(MINE)


def test_written_calls_parse_back_including_null_and_the_json_dialect():
    calls = [("note", {"text": 'a "quoted"\nline, {not: an object} 東京'}), ("plan", {"stops": [], "options": None})]
    assert pairs(FMT.parse(FMT.write(calls), TOOLS)) == calls  # None is written as the template writes it
    # keys and strings written as JSON are read too (a constrained nested value is JSON)
    text = '<|tool_call>call:plan{stops:[{"city":"Oslo","nights":1}],options:{"rail":false}}<tool_call|>'
    assert pairs(FMT.parse(text, TOOLS)) == [
        ("plan", {"stops": [{"city": "Oslo", "nights": 1}], "options": {"rail": False}})
    ]


RECORDED = [
    (
        f"Let me check.<|tool_call>call:get_weather{{city:{Q}San Francisco{Q},days:3,unit:{Q}celsius{Q}}}"
        f'<tool_call|><|tool_call>call:note{{text:{Q}He said "hi",\nthen left: Zürich — 東京 ☀{Q}}}<tool_call|>'
        "<|tool_response>",
        "Let me check.",
        [
            ("get_weather", {"city": "San Francisco", "days": 3, "unit": "celsius"}),
            ("note", {"text": 'He said "hi",\nthen left: Zürich — 東京 ☀'}),
        ],
    ),
    (
        f"<|tool_call>call:plan{{options:{{budget:99.5,rail:true}},stops:[{{city:{Q}Rome{Q},nights:2}},"
        f"{{city:{Q}Bari{Q}}}]}}<tool_call|>",
        "",
        [
            (
                "plan",
                {"options": {"budget": 99.5, "rail": True}, "stops": [{"city": "Rome", "nights": 2}, {"city": "Bari"}]},
            )
        ],
    ),
    # a bare value of a string parameter is its text; a number of one is a number
    (
        "<|tool_call>call:get_weather{city:Oslo,days: 2 ,unit:fahrenheit}<tool_call|>",
        "",
        [("get_weather", {"city": "Oslo", "days": 2, "unit": "fahrenheit"})],
    ),
]


@pytest.mark.parametrize("text,content,calls", RECORDED)
def test_recorded_replies_split_and_stream(text, content, calls):
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, FMT, TOOLS)


def test_a_string_streams_as_written_and_a_quote_is_held_back():
    head = f"<|tool_call>call:note{{text:{Q}Hello <|"
    parts, end = FMT.partial(head, TOOLS)
    assert (parts[0].args, parts[0].done, end) == ('{"text": "Hello ', False, 0)
    parts, _ = FMT.partial(head + '"|>}', TOOLS)
    assert parts[0].args == '{"text": "Hello "}' and not parts[0].done  # its closer may be on its way


MALFORMED = [
    # another family's markers: content
    (
        "I would call <tool_call>call:get_weather{city:Paris}</tool_call>",
        "I would call <tool_call>call:get_weather{city:Paris}</tool_call>",
        [],
    ),
    # garbage after the opener: content
    ("Sure <|tool_call>this is not a call", "Sure <|tool_call>this is not a call", []),
    # cut in the name: content
    ("Checking <|tool_call>call:get_wea", "Checking <|tool_call>call:get_wea", []),
    # the wrong closer: the call, closed when the reply ends
    # the wrong closer: the call ends where it stops, and what follows is content
    (
        f"<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}</tool_call>",
        "</tool_call>",
        [("get_weather", {"city": "Paris"})],
    ),
]


@pytest.mark.parametrize("text,content,calls", MALFORMED)
def test_malformed_replies_lose_nothing(text, content, calls):
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, FMT, TOOLS)


BAD_ARGS = f"<|tool_call>call:get_weather{{city:Paris {Q}oops{Q}}}<tool_call|>"


def test_arguments_not_in_gemmas_syntax_are_content():
    """A call named, then arguments that are not an object: the call ends there with empty
    arguments (it may already have been streamed: nothing is taken back) and the text that
    is not arguments is content (nothing is lost)."""
    r = split(BAD_ARGS, fmt=FMT, tools=TOOLS)
    # what was read of the arguments, closed so that they parse
    assert [(c.name, c.arguments) for c in r.calls] == [("get_weather", '{"city": "Paris"}')]
    assert r.content and BAD_ARGS.endswith(r.content) and "get_weather" not in r.content


def test_arguments_not_in_gemmas_syntax_stream_as_they_split():
    check_stream(BAD_ARGS, FMT, TOOLS)


def test_a_reply_cut_in_the_arguments_keeps_them_as_far_as_written():
    text = f"Checking.<|tool_call>call:get_weather{{days:3,city:{Q}San Fr"
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


def grammar(vocab, tools=PICK, choice="required", parallel=True, lit=None):
    from engine.runtime.prompt.replygrammar import reply_grammar

    return reply_grammar(lit=lit or vocab[2], fmt=FMT, tools=tools, choice=ToolChoice(choice), parallel=parallel)


@pytest.mark.parametrize("seed", range(4))
def test_the_grammar_writes_valid_calls(vocab, seed):
    valid_picks(drive(vocab, grammar(vocab), "", 400, seed))
    assert len(valid_picks(drive(vocab, grammar(vocab, parallel=False), "", 400, seed))) == 1


def test_the_grammar_writes_nested_arguments_in_gemmas_syntax(vocab):
    stop = {
        "type": "object",
        "properties": {"nights": {"type": "integer", "minimum": 1, "maximum": 9}, "kind": {"enum": ["city", "beach"]}},
        "required": ["kind"],
    }
    tool = parse_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "plan",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "stops": {"type": "array", "items": stop},
                            "rail": {"type": "boolean"},
                            "zone": {"type": "string", "enum": ["eu", "us"]},
                        },
                        "required": ["zone"],
                    },
                },
            }
        ]
    )
    for seed in range(3):
        text = drive(vocab, grammar(vocab, tool, parallel=False), "", 400, seed)
        (c,) = split(text, fmt=FMT, tools=tool).calls
        a = json.loads(c.arguments)
        assert a["zone"] in ("eu", "us") and set(a) <= {"stops", "rail", "zone"}, text
        assert isinstance(a.get("rail", True), bool) and isinstance(a.get("stops", []), list), text
        assert all(s["kind"] in ("city", "beach") and 1 <= s.get("nights", 1) <= 9 for s in a.get("stops", [])), text
        assert '"' not in text.replace(Q, ""), text  # Gemma's syntax, not JSON


def test_auto_calls_are_free_until_the_opener_then_valid(vocab):
    valid_picks(drive(vocab, grammar(vocab, choice="auto"), "Sure. " + FMT.trigger, 400, 1))


def test_the_grammar_compiles_with_the_quote_as_a_special_token(vocab):
    from engine.runtime.decode.grammar import compile_grammar

    m = vocab[0]
    (special,) = m.tokenize("<|im_start|>", parse_special=True)
    spec = grammar(vocab, lit=lambda s: f"<[{special}]>" if s == Q else vocab[2](s))
    assert f"<[{special}]>" in spec.source and compile_grammar(spec)
