"""DeepSeek's DSML calls, ``<｜DSML｜invoke name=…><｜DSML｜parameter name=… string=…>V</｜DSML｜parameter>``
inside ``<｜DSML｜function_calls>`` (V3.2) or ``<｜DSML｜tool_calls>`` (V4): through the real
templates and back, recorded replies whole and streamed, malformed ones, and the grammar
driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt.calls.base import text_lit
from engine.runtime.prompt.calls.paramcalls.dsml import DSML, DSML_V4, DSML_V32
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, demo_vocab, drive, pairs, render, templates
from tests.callharness import TRIP_CALLS as CALLS, TRIP_TOOLS as TOOLS, trip_conversation as _conversation

#: each format and its templates
FAMILY = {
    DSML_V32: ["deepseek-ai-DeepSeek-V3.2.jinja"],
    DSML_V4: ["deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"],
}
FORMATS = list(FAMILY)
D = DSML


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
        assert turn[i + end :].startswith("<｜end▁of▁sentence｜>"), name  # the block is read to its end
        assert fmt.write(CALLS) in turn, name  # written exactly as the template renders them
    assert pairs(fmt.parse(fmt.write(CALLS), TOOLS)) == CALLS


def test_each_format_detects_its_own_templates_only():
    srcs = templates()
    for fmt, names in FAMILY.items():
        assert sorted(n for n, src in srcs.items() if fmt.detects(src)) == sorted(names), fmt.name


RECORDED = {
    # V3.2: a string with quotes, a newline and unicode, an integer, an enum; nested JSON
    "two calls": f'Let me check.\n\n<{D}function_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" '
    f'string="true">São Paulo "Centro"\nzona 1 ☀</{D}parameter>\n<{D}parameter name="days" '
    f'string="false">3</{D}parameter>\n<{D}parameter name="unit" string="true">celsius</{D}parameter>\n'
    f'</{D}invoke>\n<{D}invoke name="plan_trip">\n<{D}parameter name="stops" string="false">[{{"city": '
    f'"Rome", "nights": 2}}, {{"city": "Oslo"}}]</{D}parameter>\n<{D}parameter name="options" '
    f'string="false">{{"by": "train", "budget": {{"max": 900}}}}</{D}parameter>\n</{D}invoke>\n'
    f"</{D}function_calls>",
    # no string attribute: typed by the tool's schema; no whitespace between the tags
    "untyped": f'<{D}function_calls><{D}invoke name="get_weather"><{D}parameter name="city">Zürich</{D}parameter>'
    f'<{D}parameter name="days">10</{D}parameter></{D}invoke></{D}function_calls>',
    # the arguments as one JSON object
    "json": f'<{D}function_calls>\n<{D}invoke name="get_weather">\n{{"city": "Tokyo", "unit": "fahrenheit"}}\n'
    f"</{D}invoke>\n</{D}function_calls>",
    "no arguments": f'<{D}function_calls>\n<{D}invoke name="plan_trip">\n\n</{D}invoke>\n</{D}function_calls>',
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
    "untyped": [("get_weather", {"city": "Zürich", "days": 10})],
    "json": [("get_weather", {"city": "Tokyo", "unit": "fahrenheit"})],
    "no arguments": [("plan_trip", {})],
}


def _as(fmt, text: str) -> str:
    """``text`` in ``fmt``'s block."""
    return text.replace("function_calls>", f"{fmt.block}>")


@pytest.mark.parametrize("case", list(RECORDED))
def test_recorded_replies_parse_whole_and_streamed(case):
    for fmt in FORMATS:
        text = _as(fmt, RECORDED[case])
        reply = split(text, fmt=fmt, tools=TOOLS)
        assert pairs(reply.calls) == WANT[case] and reply.content in ("", "Let me check."), fmt.name
        check_stream(text, fmt, TOOLS)


def test_the_string_attribute_says_how_a_value_is_written():
    text = (
        f'<{D}function_calls><{D}invoke name="get_weather"><{D}parameter name="city" string="false">42'
        f'</{D}parameter><{D}parameter name="days" string="true">42</{D}parameter></{D}invoke></{D}function_calls>'
    )
    (call,) = split(text, fmt=DSML_V32, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": 42, "days": "42"}
    # without it, the tool's schema types the value; a tool not offered: JSON where it is JSON
    plain = text.replace(' string="false"', "").replace(' string="true"', "")
    assert json.loads(split(plain, fmt=DSML_V32, tools=TOOLS).calls[0].arguments) == {"city": "42", "days": 42}
    other = split(plain.replace("get_weather", "other"), fmt=DSML_V32, tools=TOOLS).calls[0]
    assert json.loads(other.arguments) == {"city": 42, "days": 42}


def test_malformed_replies_lose_nothing():
    fmt, text = DSML_V32, RECORDED["two calls"]
    # cut inside the second call's name: the first call, then the rest as content
    cut = text[: text.index("plan_trip") + 4]
    reply = split(cut, fmt=fmt, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1]
    assert reply.content == f'Let me check.<{D}invoke name="plan'
    check_stream(cut, fmt, TOOLS)
    # cut inside a value: the call is delivered as far as it was written
    cut = text[: text.index("zona")]
    (call,) = split(cut, fmt=fmt, tools=TOOLS).calls
    assert call.name == "get_weather" and call.arguments == '{"city": "São Paulo \\"Centro\\"\\n'
    # a wrong closing marker (ASCII bars): the call closes there, the rest is content
    wrong = text.replace(f"</{D}invoke>", "</|DSML|invoke>", 1)
    reply = split(wrong, fmt=fmt, tools=TOOLS)
    assert pairs(reply.calls) == WANT["two calls"][:1]
    assert reply.content.startswith(f'Let me check.</|DSML|invoke>\n<{D}invoke name="plan_trip">')
    check_stream(wrong, fmt, TOOLS)
    # the other version's block: not a call of this format
    v4 = _as(DSML_V4, text)
    reply = split(v4, fmt=fmt, tools=TOOLS)
    assert reply.calls == [] and reply.content == v4
    check_stream(v4, fmt, TOOLS)
    # garbage after the opener, a name with nothing of a call after it, ASCII bars: content
    for bad in (
        f"Hmm. <{D}function_calls> this is not a call",
        f'<{D}function_calls>\n<{D}invoke name="get_weather">\nSure, the weather.',
        '<|DSML|function_calls>\n<|DSML|invoke name="get_weather">\n</|DSML|invoke>',
        f"<{D}function_calls>\n<{D}invoke>\n</{D}invoke>\n</{D}function_calls>",
    ):
        reply = split(bad, fmt=fmt, tools=TOOLS)
        assert reply.calls == [] and reply.content.replace(" ", "") == bad.replace(" ", ""), bad
        check_stream(bad, fmt, TOOLS)


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


def test_the_grammar_takes_markers_that_hold_special_tokens(vocab):
    """Where a vocabulary holds ``｜DSML｜`` as a control token, a marker is text, a token,
    then text (``"</" <[1]> "parameter>"``): a string value is free text that may go past
    the text before the token."""

    def lit(s: str) -> str:
        parts = s.split(DSML)
        out = [p for i, x in enumerate(parts) for p in (["<[1]>"] if i else []) + ([text_lit(x)] if x else [])]
        return " ".join(out)

    spec = reply_grammar(lit=lit, fmt=DSML_V32, tools=PICK, choice=ToolChoice("required"))
    for seed in range(2):
        assert drive(vocab, spec, "", 120, seed).startswith("<")


def test_auto_compiles_where_the_opener_holds_a_special_token():
    """Under ``auto`` the reply is free text up to the calls' opener; an opener that is
    text, then a control token, then text (DSML's ``"<" <[1]> "function_calls>"``) cannot
    end a lazy rule, so the free text runs in stretches up to its text part."""
    from engine.runtime.decode.grammar import compile_grammar

    def lit(s: str) -> str:
        parts = s.split(DSML)
        return " ".join(p for i, x in enumerate(parts) for p in (["<[1]>"] if i else []) + ([text_lit(x)] if x else []))

    spec = reply_grammar(lit=lit, fmt=DSML_V32, tools=PICK, choice=ToolChoice("auto"))
    assert "call_hd_s[lazy]" in json.loads(spec.source)["grammars"][0]["lark_grammar"]
    compile_grammar(spec)  # raises where llguidance rejects it
