"""MiniMax's calls (M2's ``<minimax:tool_call><invoke …><parameter …>``, M3's ``]<]minimax[>[``
elements, M1's JSON lines in ``<tool_calls>``) beyond the contract every format keeps
(test_contract.py): how a value is typed, M3's nested values forced by the grammar, and
the other ``<tool_calls>`` templates M1's detection tells apart."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.paramcalls.minimax import MINIMAX, MINIMAX_M1, MINIMAX_M3, NS
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import drive, pairs, templates
from tests.engine.runtime.calls.families_minimax import TOOLS


def test_a_string_parameter_is_taken_as_written_and_others_are_json():
    """The tool's schema types a value (M2 and M3): a string parameter as written, any
    other as JSON; for a tool not offered every value that is JSON is JSON; and in M3 an
    empty element is an empty list or object where the schema says so."""
    m2 = (
        '<minimax:tool_call><invoke name="get_weather"><parameter name="city">42</parameter><parameter name="days">'
        " 42 </parameter></invoke></minimax:tool_call>"
    )
    m3 = (
        f'{NS}<tool_call>{NS}<invoke name="get_weather">{NS}<city>42{NS}</city>{NS}<days>42{NS}</days>{NS}</invoke>'
        f"{NS}</tool_call>"
    )
    for fmt, text in ((MINIMAX, m2), (MINIMAX_M3, m3)):
        (call,) = split(text, fmt=fmt, tools=TOOLS).calls
        assert json.loads(call.arguments) == {"city": "42", "days": 42}
        (call,) = split(text.replace("get_weather", "other"), fmt=fmt, tools=TOOLS).calls
        assert json.loads(call.arguments) == {"city": 42, "days": 42}
    empty = f'{NS}<tool_call>{NS}<invoke name="plan_trip">{NS}<stops>{NS}</stops>{NS}<options>{NS}</options>'
    empty += f"{NS}</invoke>{NS}</tool_call>"
    assert pairs(split(empty, fmt=MINIMAX_M3, tools=TOOLS).calls) == [("plan_trip", {"stops": [], "options": {}})]


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


def test_m3_nested_values_are_valid_for_the_schema(vocab):
    """An object holding a list of bounded integers and a boolean, spelled out as elements,
    is forced valid: one call and nothing else."""
    spec = reply_grammar(lit=vocab[2], fmt=MINIMAX_M3, tools=NESTED, choice=ToolChoice("required"), parallel=False)
    for seed in range(3):
        text = drive(vocab, spec, "", 400, seed)
        reply = split(text, fmt=MINIMAX_M3, tools=NESTED)
        assert reply.content == "" and len(reply.calls) == 1, text
        args = json.loads(reply.calls[0].arguments)
        assert reply.calls[0].name == "pick" and set(args) == {"mode", "n", "opts"}, args
        assert args["mode"] in ("fast", "slow") and type(args["n"]) is int and 0 <= args["n"] <= 9, args
        xs, on = args["opts"]["xs"], args["opts"]["on"]
        assert xs and all(type(x) is int and 0 <= x <= 9 for x in xs) and type(on) is bool, args


def test_templates_with_tool_calls_tags_are_told_apart():
    """M1 writes JSON lines in <tool_calls>, Apriel a JSON list in it: only M1's template is
    M1's, and neither is M2's or M3's."""
    srcs = templates()
    apriel = ("unsloth-Apriel-1.5.jinja", "Apriel-1.6-15b-Thinker-fixed.jinja")
    assert all("<tool_calls>" in srcs[n] for n in ("MiniMax-M1.jinja", *apriel))
    assert [n for n, src in srcs.items() if MINIMAX_M1.detects(src)] == ["MiniMax-M1.jinja"]
    assert not any(f.detects(srcs[n]) for f in (MINIMAX, MINIMAX_M3) for n in ("MiniMax-M1.jinja", *apriel))
