"""MiniMax's calls: M2's ``<minimax:tool_call><invoke name=…><parameter name=…>V</parameter></invoke>``
and M3's ``]<]minimax[>[``-marked elements (a nested value spelled out as elements):
through the real templates and back, recorded replies whole and streamed, malformed ones,
and the grammar driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.paramcalls.minimax import MINIMAX, MINIMAX_M1, MINIMAX_M3, NS
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, demo_vocab, drive, pairs, render, streamed, templates
from tests.callharness import trip_conversation as _conversation

TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "days": {"type": "integer"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "plan_trip",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "stops": {"type": "array", "items": {"type": "object"}},
                        "options": {"type": "object"},
                    },
                },
            },
        },
    ]
)
CALLS = [
    ("get_weather", {"city": "San Francisco", "days": 3}),
    (
        "plan_trip",
        {
            "stops": [{"city": "Rome", "nights": 2, "open": True}, {"city": "Oslo"}],
            "options": {"by": "train", "avoid": ["tolls", "ferries"]},
        },
    ),
]
#: each format and its templates
FAMILY = {MINIMAX: ["MiniMax-M2.jinja"], MINIMAX_M3: ["MiniMax-M3.jinja"]}
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
        got, end = fmt.scan(turn[i:], TOOLS)
        assert i >= 0 and pairs(got) == CALLS, name
        assert turn[i + end :].startswith("[e~["), name  # the block is read to its end
        assert fmt.write(CALLS) in turn, name  # written exactly as the template renders them
    assert pairs(fmt.parse(fmt.write(CALLS), TOOLS)) == CALLS


def test_each_format_detects_its_own_templates_only():
    srcs = templates()
    for fmt, names in FAMILY.items():
        assert sorted(n for n, src in srcs.items() if fmt.detects(src)) == sorted(names), fmt.name
    # M1 writes JSON lines in <tool_calls>: not this family
    assert "<tool_calls>" in srcs["MiniMax-M1.jinja"] and not any(f.detects(srcs["MiniMax-M1.jinja"]) for f in FORMATS)


RECORDED = {
    # a string with quotes, a newline and unicode, an integer, an enum; nested JSON
    MINIMAX: {
        "two calls": 'Let me check.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">São '
        'Paulo "Centro"\nzona 1 ☀</parameter>\n<parameter name="days">3</parameter>\n<parameter name="unit">'
        'celsius</parameter>\n</invoke>\n<invoke name="plan_trip">\n<parameter name="stops">[{"city": '
        '"Rome", "nights": 2}, {"city": "Oslo"}]</parameter>\n<parameter name="options">{"by": "train", '
        '"budget": {"max": 900}}</parameter>\n</invoke>\n</minimax:tool_call>',
        # values on lines of their own (trimmed, as MiniMax's parser trims them); no whitespace between tags
        "lines": '<minimax:tool_call><invoke name="get_weather"><parameter name="city">\nZürich\n</parameter>'
        '<parameter name="days">\n10\n</parameter><parameter name="tags">["sun", "3"]</parameter></invoke>'
        "</minimax:tool_call>",
        "no arguments": '<minimax:tool_call>\n<invoke name="plan_trip">\n</invoke>\n</minimax:tool_call>',
    },
    MINIMAX_M3: {
        "two calls": f'Let me check.{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>São Paulo "Centro"\n'
        f"zona 1 ☀{NS}</city>{NS}<days>3{NS}</days>{NS}<unit>celsius{NS}</unit>{NS}</invoke>\n"
        f'{NS}<invoke name="plan_trip">{NS}<stops>{NS}<item>{NS}<city>Rome{NS}</city>{NS}<nights>2'
        f"{NS}</nights>{NS}</item>{NS}<item>{NS}<city>Oslo{NS}</city>{NS}</item>{NS}</stops>{NS}<options>"
        f"{NS}<by>train{NS}</by>{NS}<budget>{NS}<max>900{NS}</max>{NS}</budget>{NS}</options>"
        f"{NS}</invoke>\n{NS}</tool_call>",
        # a list of strings (typed by the items' schema), newlines between the elements
        "lines": f'{NS}<tool_call>\n{NS}<invoke name="get_weather">\n{NS}<city>Zürich{NS}</city>\n{NS}<days>10'
        f"{NS}</days>\n{NS}<tags>\n{NS}<item>sun{NS}</item>\n{NS}<item>3{NS}</item>\n{NS}</tags>\n{NS}</invoke>\n"
        f"{NS}</tool_call>",
        "no arguments": f'{NS}<tool_call>\n{NS}<invoke name="plan_trip">{NS}</invoke>\n{NS}</tool_call>',
    },
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
    "lines": [("get_weather", {"city": "Zürich", "days": 10, "tags": ["sun", "3"]})],
    "no arguments": [("plan_trip", {})],
}


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("case", list(WANT))
def test_recorded_replies_parse_whole_and_streamed(fmt, case):
    text = RECORDED[fmt][case]
    reply = split(text, fmt=fmt, tools=TOOLS)
    assert pairs(reply.calls) == WANT[case] and reply.content in ("", "Let me check.")
    check_stream(text, fmt, TOOLS)


def test_a_string_parameter_is_taken_as_written_and_others_are_json():
    m2 = '<minimax:tool_call><invoke name="get_weather"><parameter name="city">42</parameter><parameter name="days"> 42 </parameter></invoke></minimax:tool_call>'  # noqa: E501
    m3 = f'{NS}<tool_call>{NS}<invoke name="get_weather">{NS}<city>42{NS}</city>{NS}<days>42{NS}</days>{NS}</invoke>{NS}</tool_call>'  # noqa: E501
    for fmt, text in ((MINIMAX, m2), (MINIMAX_M3, m3)):
        (call,) = split(text, fmt=fmt, tools=TOOLS).calls
        assert json.loads(call.arguments) == {"city": "42", "days": 42}
        # a tool not offered: every value that is JSON is JSON
        (call,) = split(text.replace("get_weather", "other"), fmt=fmt, tools=TOOLS).calls
        assert json.loads(call.arguments) == {"city": 42, "days": 42}
    # M3: an empty element is an empty list or object where the schema says so
    empty = f'{NS}<tool_call>{NS}<invoke name="plan_trip">{NS}<stops>{NS}</stops>{NS}<options>{NS}</options>'
    empty += f"{NS}</invoke>{NS}</tool_call>"
    assert pairs(split(empty, fmt=MINIMAX_M3, tools=TOOLS).calls) == [("plan_trip", {"stops": [], "options": {}})]


def test_malformed_m2_replies_lose_nothing():
    text = RECORDED[MINIMAX]["two calls"]
    # cut inside the second call's name: the first call, then the rest as content
    cut = text[: text.index("plan_trip") + 4]
    reply = split(cut, fmt=MINIMAX, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1] and reply.content == 'Let me check.<invoke name="plan'
    check_stream(cut, MINIMAX, TOOLS)
    # cut inside a value: the call is delivered as far as it was written
    (call,) = split(text[: text.index("zona")], fmt=MINIMAX, tools=TOOLS).calls
    assert call.name == "get_weather" and call.arguments == '{"city": "São Paulo \\"Centro\\"'
    # a wrong closing marker: the call closes there, the rest is content
    wrong = text.replace("</invoke>", "</invok>", 1)
    reply = split(wrong, fmt=MINIMAX, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1]
    assert reply.content.startswith('Let me check.</invok>\n<invoke name="plan_trip">')
    check_stream(wrong, MINIMAX, TOOLS)
    # garbage after the opener, Hermes JSON in the block, a name with nothing of a call after it: content
    for bad in (
        "Hmm. <minimax:tool_call> this is not a call",
        '<minimax:tool_call>\n{"name": "get_weather", "arguments": {}}\n</minimax:tool_call>',
        '<minimax:tool_call>\n<invoke name="get_weather">Sure, the weather.',
        "<minimax:tool_call>\n<invoke>\n</invoke>\n</minimax:tool_call>",
    ):
        reply = split(bad, fmt=MINIMAX, tools=TOOLS)
        assert reply.calls == [] and reply.content.replace(" ", "") == bad.replace(" ", ""), bad
        check_stream(bad, MINIMAX, TOOLS)


def test_malformed_m3_replies_lose_nothing():
    text = RECORDED[MINIMAX_M3]["two calls"]
    # cut inside a nested value: the call is delivered with the arguments before it
    (_, call) = split(text[: text.index("Oslo")], fmt=MINIMAX_M3, tools=TOOLS).calls
    assert call.name == "plan_trip" and call.arguments == "{"
    # cut inside a string: as far as it was written, a marker's beginning held back
    (call,) = split(text[: text.index("zona") + 6] + NS[:4], fmt=MINIMAX_M3, tools=TOOLS).calls
    assert call.arguments == '{"city": "São Paulo \\"Centro\\"\\nzona 1'
    # a nested value closed by another element's tag: the call closes before it, the rest is content
    wrong = text.replace(f"{NS}</item>", f"{NS}</itm>", 1)
    reply = split(wrong, fmt=MINIMAX_M3, tools=TOOLS)
    assert pairs(reply.calls) == [WANT["two calls"][0], ("plan_trip", {})]
    assert reply.content.startswith(f"Let me check.{NS}<stops>{NS}<item>")
    check_stream(wrong, MINIMAX_M3, TOOLS)
    # a string followed by a marker that is not its end: the string ends there
    odd = text.replace(f'Centro"\nzona 1 ☀{NS}</city>', f'Centro"{NS}<b>x{NS}</b>{NS}</city>', 1)
    reply = split(odd, fmt=MINIMAX_M3, tools=TOOLS)
    assert pairs(reply.calls) == [("get_weather", {"city": 'São Paulo "Centro"'})]
    assert reply.content.startswith(f"Let me check.{NS}<b>x")
    check_stream(odd, MINIMAX_M3, TOOLS)
    # garbage after the opener, M2's syntax under M3's opener: content
    for bad in (
        f"Hmm. {NS}<tool_call> this is not a call",
        f'{NS}<tool_call>\n<invoke name="get_weather">\n</invoke>',
        f'{NS}<tool_call>\n{NS}<invoke name="get_weather">Sure, the weather.',
    ):
        reply = split(bad, fmt=MINIMAX_M3, tools=TOOLS)
        assert reply.calls == [] and reply.content.replace(" ", "") == bad.replace(" ", ""), bad
        check_stream(bad, MINIMAX_M3, TOOLS)


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
#: M3 spells nested values out: an object with a list of bounded integers
NESTED = parse_tools(
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
                        "opts": {
                            "type": "object",
                            "properties": {
                                "xs": {
                                    "type": "array",
                                    "items": {"type": "integer", "minimum": 0, "maximum": 9},
                                    "minItems": 1,
                                },
                                "on": {"type": "boolean"},
                            },
                            "required": ["xs", "on"],
                        },
                    },
                    "required": ["mode", "n", "opts"],
                },
            },
        }
    ]
)


@pytest.fixture(scope="module")
def vocab():
    return demo_vocab()


def _valid(calls, nested: bool = False) -> None:
    assert calls
    for c in calls:
        args = json.loads(c.arguments)
        assert c.name == "pick" and set(args) <= {"mode", "n", "note", "opts"}, args
        assert args["mode"] in ("fast", "slow") and type(args["n"]) is int and 0 <= args["n"] <= 9, args
        assert isinstance(args.get("note", ""), str) and len(args.get("note", "")) <= 12, args
        if nested:
            xs, on = args["opts"]["xs"], args["opts"]["on"]
            assert xs and all(type(x) is int and 0 <= x <= 9 for x in xs) and type(on) is bool, args


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_required_calls_are_valid_for_the_schema(vocab, fmt):
    for parallel in (True, False):
        spec = reply_grammar(lit=vocab[2], fmt=fmt, tools=PICK, choice=ToolChoice("required"), parallel=parallel)
        for seed in range(3):
            text = drive(vocab, spec, "", 400, seed)
            reply = split(text, fmt=fmt, tools=PICK)
            _valid(reply.calls)
            assert reply.content == "" and (parallel or len(reply.calls) == 1), text


def test_m3_nested_values_are_valid_for_the_schema(vocab):
    spec = reply_grammar(lit=vocab[2], fmt=MINIMAX_M3, tools=NESTED, choice=ToolChoice("required"), parallel=False)
    for seed in range(3):
        text = drive(vocab, spec, "", 400, seed)
        reply = split(text, fmt=MINIMAX_M3, tools=NESTED)
        _valid(reply.calls, nested=True)
        assert reply.content == "" and len(reply.calls) == 1, text


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_auto_calls_are_forced_valid_once_opened(vocab, fmt):
    spec = reply_grammar(lit=vocab[2], fmt=fmt, tools=PICK, choice=ToolChoice("auto"))
    assert fmt.trigger not in drive(vocab, spec, "", 40)
    text = drive(vocab, spec, "Sure. " + fmt.trigger, 400)
    reply = split(text, fmt=fmt, tools=PICK)
    _valid(reply.calls)
    assert reply.content == "Sure."


def test_the_grammar_takes_markers_that_are_special_tokens(vocab):
    """In M3's vocabulary ``]<]minimax[>[`` is a control token (rendering as no text): a
    string value is then free text up to it."""

    def lit(s: str) -> str:
        rest = s[len(NS) :] if s.startswith(NS) else s
        return ("<[1]> " if s.startswith(NS) else "") + (json.dumps(rest, ensure_ascii=False) if rest else "")

    spec = reply_grammar(lit=lit, fmt=MINIMAX_M3, tools=PICK, choice=ToolChoice("required"))
    for seed in range(2):
        assert "<tool_call>" in drive(vocab, spec, "", 120, seed)


# ================================================================ M1: JSON lines in <tool_calls>
M1 = MINIMAX_M1


def test_m1_calls_round_trip_through_the_real_template():
    text = render(
        templates()["MiniMax-M1.jinja"],
        _conversation(CALLS),
        tools=[t.to_template() for t in TOOLS],
        add_generation_prompt=False,
    )
    turn = text[text.index("plan a trip.") :]  # the tools' description shows the syntax too
    i = M1.find(turn)
    got, end = M1.scan(turn[i:], TOOLS)
    assert i >= 0 and pairs(got) == CALLS
    assert turn[i + end :].startswith("<end_of_sentence>")  # the block is read to its end
    assert M1.write(CALLS) in turn  # written exactly as the template renders them
    assert pairs(M1.parse(M1.write(CALLS), TOOLS)) == CALLS


def test_m1_detects_its_own_template_only():
    srcs = templates()
    assert [n for n, src in srcs.items() if M1.detects(src)] == ["MiniMax-M1.jinja"]
    # Apriel's <tool_calls> hold a JSON list: not M1's
    assert all("<tool_calls>" in srcs[n] for n in ("unsloth-Apriel-1.5.jinja", "Apriel-1.6-15b-Thinker-fixed.jinja"))


M1_RECORDED = [
    # two calls, a line each: a string with quotes, a newline and unicode, an integer, an enum; nested JSON
    (
        'Let me check.\n<tool_calls>\n{"name": "get_weather", "arguments": {"city": "São Paulo '
        '\\"Centro\\"\\nzona 1 ☀", '
        '"days": 3, "unit": "celsius"}}\n{"name": "plan_trip", "arguments": {"stops": [{"city": "Rome", "nights": 2}, '
        '{"city": "Oslo"}], "options": {"by": "train", "budget": {"max": 900}}}}\n</tool_calls>',
        "Let me check.",
        WANT["two calls"],
    ),
    # compact, on one line
    (
        '<tool_calls>{"name":"get_weather","arguments":{"city":"Zürich","days":10,"tags":["sun","3"]}}</tool_calls>',
        "",
        WANT["lines"],
    ),
    ('<tool_calls>\n{"name": "plan_trip", "arguments": {}}\n</tool_calls>', "", WANT["no arguments"]),
]


@pytest.mark.parametrize("text,content,calls", M1_RECORDED)
def test_m1_recorded_replies_parse_whole_and_streamed(text, content, calls):
    reply = split(text, fmt=M1, tools=TOOLS)
    assert (reply.content, pairs(reply.calls)) == (content, calls)
    check_stream(text, M1, TOOLS)


def test_m1_arguments_written_as_a_json_string_are_the_object_it_holds():
    text = '<tool_calls>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_calls>'
    assert pairs(split(text, fmt=M1, tools=TOOLS).calls) == [("get_weather", {"city": "Oslo"})]
    check_stream(text, M1, TOOLS, grows=False)


M1_MALFORMED = [
    # Hermes' and Apriel's syntax, garbage after the opener, cut in the name: content
    (
        'I would call <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
        'I would call <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
        [],
    ),
    (
        '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_calls>',
        '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_calls>',
        [],
    ),
    ("Hmm. <tool_calls> this is not a call", "Hmm. <tool_calls> this is not a call", []),
    ('Checking <tool_calls>\n{"name": "get_wea', 'Checking <tool_calls>\n{"name": "get_wea', []),
    # the block left open: the calls
    ('<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n', "", [("get_weather", {"city": "Rome"})]),
    # arguments that are no object: the call with none, the rest content
    (
        '<tool_calls>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_calls>',
        "[1, 2]}\n</tool_calls>",
        [("get_weather", {})],
    ),
    # a second line that is no call: the first call, the rest content
    (
        '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\nand then\n</tool_calls>',
        "and then\n</tool_calls>",
        [("get_weather", {"city": "Rome"})],
    ),
]


@pytest.mark.parametrize("text,content,calls", M1_MALFORMED)
def test_m1_malformed_replies_lose_nothing(text, content, calls):
    reply = split(text, fmt=M1, tools=TOOLS)
    assert (reply.content, pairs(reply.calls)) == (content, calls)
    check_stream(text, M1, TOOLS)


def test_m1_a_reply_cut_in_the_arguments_keeps_them_as_far_as_written():
    text = 'Checking.\n<tool_calls>\n{"name": "get_weather", "arguments": {"days":3,"city":"San Fr'
    want = ("Checking.", [("get_weather", '{"days": 3, "city": "San Fr')])
    for size in (1, 3, 7):
        _, got = streamed(text, M1, TOOLS, size=size)
        assert (got.content, [(c.name, c.arguments) for c in got.calls]) == want
    reply = split(text, fmt=M1, tools=TOOLS)
    assert (reply.content, [(c.name, c.arguments) for c in reply.calls]) == want


def test_m1_required_calls_are_valid_for_the_schema(vocab):
    for parallel in (True, False):
        spec = reply_grammar(lit=vocab[2], fmt=M1, tools=PICK, choice=ToolChoice("required"), parallel=parallel)
        for seed in range(3):
            text = drive(vocab, spec, "", 400, seed)
            reply = split(text, fmt=M1, tools=PICK)
            _valid(reply.calls)
            assert reply.content == "" and (parallel or len(reply.calls) == 1), text
            assert text.rstrip().endswith("</tool_calls>"), text


def test_m1_auto_calls_are_forced_valid_once_opened(vocab):
    spec = reply_grammar(lit=vocab[2], fmt=M1, tools=PICK, choice=ToolChoice("auto"))
    assert M1.trigger not in drive(vocab, spec, "", 40)
    reply = split(drive(vocab, spec, "Sure. " + M1.trigger, 400), fmt=M1, tools=PICK)
    _valid(reply.calls)
    assert reply.content == "Sure."
