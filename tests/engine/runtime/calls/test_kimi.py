"""Kimi K2's calls, ``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0``
``<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>``: through its
real templates, recorded and malformed replies streamed, and its grammar driven by a random
model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.jsoncalls.kimi import K3_MESSAGE_END, K3_RESPONSE_END, K3_TOOLS, K3_TOOLS_END, KIMI_K3
from engine.runtime.prompt.calls.jsoncalls.kimi import KIMI as FMT
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, drive, pairs, render, streamed, templates
from tests.callharness import TRAVEL_CALLS as CALLS, TRAVEL_TOOLS, travel_conversation as conversation

#: the templates that write K2's calls (Kimi K3's template writes calls in its own tags)
MINE = ("Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja")
B, C, A, E, END = FMT.BEGIN, FMT.CALL, FMT.ARGS, FMT.CALL_END, FMT.END

#: the travel tools with a dotted name (``web.search``) in place of ``note``
TOOLS = (
    *TRAVEL_TOOLS[:2],
    *parse_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "web.search",
                    "description": "A dotted name.",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                },
            },
        ]
    ),
)


@pytest.mark.parametrize("name", MINE)
def test_the_templates_calls_parse_back_to_the_calls_put_in(name):
    source = templates()[name]
    text = render(source, conversation(CALLS), tools=[t.to_template() for t in TOOLS], add_generation_prompt=False)
    i = FMT.find(text)
    assert i >= 0, text
    calls, end = FMT.scan(text[i:], TOOLS)
    assert pairs(calls) == CALLS and text[i:].startswith(FMT.write(CALLS))  # ids functions.NAME:0, :1
    assert pairs(FMT.parse(FMT.write(CALLS), TOOLS)) == CALLS


def test_only_kimi_k2_templates_are_detected():
    got = {name for name, source in templates().items() if FMT.detects(source)}
    assert got == set(MINE)


RECORDED = [
    (
        f'Let me check.{B}{C}functions.get_weather:0{A}{{"city": "San Francisco", "days": 3, "unit": "celsius"}}{E}'
        f'{C}functions.web.search:1{A}{{"q":"He said \\"hi\\",\\nthen: Zürich — 東京 ☀"}}{E}{END}',
        "Let me check.",
        [
            ("get_weather", {"city": "San Francisco", "days": 3, "unit": "celsius"}),
            ("web.search", {"q": 'He said "hi",\nthen: Zürich — 東京 ☀'}),
        ],
    ),
    # spaced as K2 is often decoded; the index counts the conversation's calls
    (
        f'{B} {C} functions.plan:7 {A} {{"stops": [{{"city": "Rome", "nights": 2}}], "options": {{"rail": false}}}} '
        f"{E} {END}",
        "",
        [("plan", {"stops": [{"city": "Rome", "nights": 2}], "options": {"rail": False}})],
    ),
    # a bare name
    (f'{B}{C}get_weather{A}{{"city": "Oslo"}}{E}{END}', "", [("get_weather", {"city": "Oslo"})]),
]


@pytest.mark.parametrize("text,content,calls", RECORDED)
def test_recorded_replies_split_and_stream(text, content, calls):
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, FMT, TOOLS)


MALFORMED = [
    # another family's markers: content
    (
        'I would call <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        'I would call <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        [],
    ),
    # garbage after the opener: content
    (f"Sure {B}this is not a call", f"Sure {B}this is not a call", []),
    # cut in the name: content
    (f"Checking {B}{C}functions.get_wea", f"Checking {B}{C}functions.get_wea", []),
    # the section left open: the calls
    (f'{B}{C}functions.get_weather:0{A}{{"city": "Paris"}}{E}', "", [("get_weather", {"city": "Paris"})]),
]


@pytest.mark.parametrize("text,content,calls", MALFORMED)
def test_malformed_replies_lose_nothing(text, content, calls):
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, FMT, TOOLS)


BAD_ARGS = f"{B}{C}functions.get_weather:0{A}[1, 2]{E}{END}"


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
    text = f'Checking.{B}{C}functions.get_weather:0{A}{{"days":3,"city":"San Fr'
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
    assert text.rstrip().endswith(END)
    assert len(valid_picks(drive(vocab, grammar(vocab, parallel=False), "", 400, seed))) == 1


def test_auto_calls_are_free_until_the_opener_then_valid(vocab):
    valid_picks(drive(vocab, grammar(vocab, choice="auto"), "Sure. " + FMT.trigger, 400, 1))


# ===================================================================== Kimi K3
#: ``<|open|>TAG ATTRS<|sep|>`` … ``<|close|>TAG<|sep|>``; the calls follow the response block
K3 = KIMI_K3
RE, TS, TE, ME = K3_RESPONSE_END, K3_TOOLS, K3_TOOLS_END, K3_MESSAGE_END


def k3_call(name: str, *args: str, index: int = 1) -> str:
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{"".join(args)}<|close|>call<|sep|>'


def k3_arg(key: str, kind: str | None, value: str) -> str:
    typ = f' type="{kind}"' if kind else ""
    return f'<|open|>argument key="{key}"{typ}<|sep|>{value}<|close|>argument<|sep|>'


def test_k3_the_templates_calls_parse_back_to_the_calls_put_in():
    text = render(
        templates()["Kimi-K3.jinja"],
        conversation(CALLS),
        tools=[t.to_template() for t in TOOLS],
        add_generation_prompt=False,
    )
    turn = text[text.index("plan my trip.") :]
    i = K3.find(turn)
    assert i >= 0 and turn[i:].startswith(RE + TS), turn  # the response block's end is the calls'
    calls, end = K3.scan(turn[i:], TOOLS)
    assert pairs(calls) == CALLS
    assert turn[i + end :].startswith("<|end_of_msg|>")  # read past the tools and the message's end
    assert K3.write(CALLS) in turn  # written as the template writes them (index from 1, types)
    assert pairs(K3.parse(K3.write(CALLS), TOOLS)) == CALLS


def test_k3_only_the_kimi_k3_template_is_detected():
    assert {name for name, source in templates().items() if K3.detects(source)} == {"Kimi-K3.jinja"}
    assert not FMT.detects(templates()["Kimi-K3.jinja"])


K3_RECORDED = [
    # after the response's text (the prompt opened the response block); a string with quotes,
    # newlines and unicode, a number, an enum; the message's end after the tools
    (
        "Let me check."
        + RE
        + TS
        + k3_call(
            "get_weather",
            k3_arg("city", "string", 'São Paulo "Centro"\nzona 1 ☀'),
            k3_arg("days", "number", "3"),
            k3_arg("unit", "string", "celsius"),
        )
        + k3_call("web.search", k3_arg("q", "string", 'He said "hi" & left: <b> 東京'), index=2)
        + TE
        + ME,
        "Let me check.",
        [
            ("get_weather", {"city": 'São Paulo "Centro"\nzona 1 ☀', "days": 3, "unit": "celsius"}),
            ("web.search", {"q": 'He said "hi" & left: <b> 東京'}),
        ],
    ),
    # nested values as JSON; no response block; a value with no type, typed by the schema
    (
        TS
        + k3_call(
            "plan",
            k3_arg("stops", "array", '[{"city": "Rome", "nights": 2}, {"city": "Oslo"}]'),
            k3_arg("options", None, '{"budget": 900.5, "rail": false}'),
        )
        + TE,
        "",
        [
            (
                "plan",
                {
                    "stops": [{"city": "Rome", "nights": 2}, {"city": "Oslo"}],
                    "options": {"budget": 900.5, "rail": False},
                },
            )
        ],
    ),
    # the type says how a value is written, whatever the schema says; an escaped attribute
    (
        TS + k3_call("get_weather", k3_arg("city", "string", "42"), k3_arg("a&amp;&quot;b", "boolean", "true")) + TE,
        "",
        [("get_weather", {"city": "42", 'a&"b': True})],
    ),
    # the arguments as one JSON object (the template's way for arguments given as a string)
    (
        RE
        + TS
        + k3_call("get_weather", '<|open|>json type="object"<|sep|>{"city":"Oslo","days":2}<|close|>json<|sep|>')
        + TE,
        "",
        [("get_weather", {"city": "Oslo", "days": 2})],
    ),
    # no arguments
    (TS + k3_call("plan") + TE, "", [("plan", {})]),
]


@pytest.mark.parametrize("text,content,calls", K3_RECORDED)
def test_k3_recorded_replies_split_and_stream(text, content, calls):
    r = split(text, fmt=K3, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, K3, TOOLS)


K3_WEATHER = k3_call("get_weather", k3_arg("city", "string", "Paris"), k3_arg("days", "number", "3"))
K3_MALFORMED = [
    # another family's markers: content
    (
        f"I would call {B}{C}functions.get_weather:0{A}{{}}{E}{END}",
        f"I would call {B}{C}functions.get_weather:0{A}{{}}{E}{END}",
        [],
    ),
    # garbage after the opener: content, the response block's end too
    (f"Sure{RE}{TS}this is not a call", f"Sure{RE}{TS}this is not a call", []),
    # cut in the name, a head that is no tag's: content
    (f'Checking{RE}{TS}<|open|>call tool="get_wea', f'Checking{RE}{TS}<|open|>call tool="get_wea', []),
    (f'{TS}<|open|>call tool="get_weather" what<|sep|>', f'{TS}<|open|>call tool="get_weather" what<|sep|>', []),
    # the tools left open: the calls
    (TS + K3_WEATHER, "", [("get_weather", {"city": "Paris", "days": 3})]),
    # a string closed by the call's end: it ends there, the rest is content
    (
        TS + k3_call("get_weather", '<|open|>argument key="city" type="string"<|sep|>Paris') + TE,
        f"<|close|>call<|sep|>{TE}",
        [("get_weather", {"city": "Paris"})],
    ),
    # a number closed by another tag: the call ends with it, the rest is content
    (
        TS
        + '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="days" type="number"<|sep|>3'
        + k3_arg("city", "string", "Rome")
        + "<|close|>call<|sep|>"
        + TE,
        k3_arg("city", "string", "Rome") + "<|close|>call<|sep|>" + TE,
        [("get_weather", {"days": 3})],
    ),
    # text after a call's head: the call, named, ends there
    (
        f'{TS}<|open|>call tool="get_weather" index="1"<|sep|>Sure, the weather.',
        "Sure, the weather.",
        [("get_weather", {})],
    ),
    # a wrong closing tag after the arguments; the second call is content
    (
        TS + K3_WEATHER.replace("<|close|>call<|sep|>", "<|close|>cal<|sep|>") + k3_call("plan", index=2) + TE,
        "<|close|>cal<|sep|>" + k3_call("plan", index=2) + TE,
        [("get_weather", {"city": "Paris", "days": 3})],
    ),
    # a JSON block that is not an object: the call with no arguments, the rest content
    (
        TS + k3_call("get_weather", '<|open|>json type="object"<|sep|>[1, 2]<|close|>json<|sep|>') + TE,
        "[1, 2]<|close|>json<|sep|><|close|>call<|sep|>" + TE,
        [("get_weather", {})],
    ),
]


@pytest.mark.parametrize("text,content,calls", K3_MALFORMED)
def test_k3_malformed_replies_lose_nothing(text, content, calls):
    r = split(text, fmt=K3, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, calls)
    check_stream(text, K3, TOOLS)


def test_k3_a_reply_cut_in_a_value_keeps_it_as_far_as_written():
    text = f'Checking.{RE}{TS}<|open|>call tool="get_weather" index="1"<|sep|>{k3_arg("days", "number", "3")}'
    text += '<|open|>argument key="city" type="string"<|sep|>San Fr<|clo'
    want = ("Checking.", [("get_weather", '{"days": 3, "city": "San Fr')])  # a marker's beginning held back
    for size in (1, 3, 7):
        _, got = streamed(text, K3, TOOLS, size=size)
        assert (got.content, [(c.name, c.arguments) for c in got.calls]) == want
    r = split(text, fmt=K3, tools=TOOLS)
    assert (r.content, [(c.name, c.arguments) for c in r.calls]) == want


def k3_grammar(vocab, choice="required", parallel=True):
    from engine.runtime.prompt.replygrammar import reply_grammar

    return reply_grammar(lit=vocab[2], fmt=K3, tools=PICK, choice=ToolChoice(choice), parallel=parallel)


def k3_valid_picks(text: str) -> list[dict]:
    r = split(text, fmt=K3, tools=PICK)
    assert r.calls and r.content == "", text
    out = []
    for c in r.calls:
        a = json.loads(c.arguments)
        assert c.name == "pick" and set(a) <= {"mode", "n", "why"}, text
        assert a["mode"] in ("fast", "slow") and type(a["n"]) is int and 1 <= a["n"] <= 5, text
        assert isinstance(a.get("why", ""), str) and len(a.get("why", "")) <= 12, text
        out.append(a)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_k3_the_grammar_writes_valid_calls(vocab, seed):
    text = drive(vocab, k3_grammar(vocab), "", 400, seed)
    k3_valid_picks(text)
    assert text.startswith(RE + TS) and TE in text  # the response block closed, as the template writes it
    assert len(k3_valid_picks(drive(vocab, k3_grammar(vocab, parallel=False), "", 400, seed))) == 1


def test_k3_auto_calls_are_free_until_the_opener_then_valid(vocab):
    spec = k3_grammar(vocab, choice="auto")
    assert TS not in drive(vocab, spec, "", 40)
    text = drive(vocab, spec, "Sure. " + K3.trigger, 400, 1)
    r = split(text, fmt=K3, tools=PICK)
    assert r.content == "Sure." and r.calls
    k3_valid_picks(text[text.index(K3.trigger) :])


#: nested values and a dotted name (strings bounded: a random model's text would run on)
NESTED = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "trip.plan",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "stops": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "city": {"type": "string", "maxLength": 8},
                                    "nights": {"type": "integer", "minimum": 1, "maximum": 9},
                                },
                                "required": ["city", "nights"],
                                "additionalProperties": False,
                            },
                        },
                        "rail": {"type": "boolean"},
                        "unit": {"type": "string", "enum": ["km", "mi"]},
                    },
                    "required": ["stops", "rail", "unit"],
                },
            },
        },
    ]
)


def test_k3_the_grammar_takes_nested_schemas_and_dotted_names(vocab):
    from engine.runtime.prompt.replygrammar import reply_grammar

    spec = reply_grammar(lit=vocab[2], fmt=K3, tools=NESTED, choice=ToolChoice("required"), parallel=False)
    for seed in range(3):
        text = drive(vocab, spec, "", 400, seed)
        r = split(text, fmt=K3, tools=NESTED)
        assert len(r.calls) == 1 and r.content == "" and r.calls[0].name == "trip.plan", text
        args = json.loads(r.calls[0].arguments)
        assert type(args["rail"]) is bool and args["unit"] in ("km", "mi") and 1 <= len(args["stops"]) <= 3, text
        for stop in args["stops"]:
            assert isinstance(stop["city"], str) and len(stop["city"]) <= 8 and 1 <= stop["nights"] <= 9, text
