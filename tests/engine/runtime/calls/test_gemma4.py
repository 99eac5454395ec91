"""Gemma 4's calls, ``<|tool_call>call:NAME{k:<|"|>v<|"|>,n:3}<tool_call|>``, beyond the
contract every format keeps (test_contract.py): its JSON dialect written and read back, a
string streamed with its quote held back, and nested arguments forced in its syntax."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.paramcalls.gemma4 import GEMMA4 as FMT
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import TRAVEL_TOOLS as TOOLS
from tests.callharness import drive, pairs

Q = '<|"|>'


def test_written_calls_parse_back_including_null_and_the_json_dialect():
    """Quotes, newlines, braces and unicode in a string and a null value are written as the
    template writes them and read back; keys and strings written as JSON are read too (a
    constrained nested value is JSON)."""
    calls = [("note", {"text": 'a "quoted"\nline, {not: an object} 東京'}), ("plan", {"stops": [], "options": None})]
    assert pairs(FMT.parse(FMT.write(calls), TOOLS)) == calls
    text = '<|tool_call>call:plan{stops:[{"city":"Oslo","nights":1}],options:{"rail":false}}<tool_call|>'
    assert pairs(FMT.parse(text, TOOLS)) == [
        ("plan", {"stops": [{"city": "Oslo", "nights": 1}], "options": {"rail": False}})
    ]


def test_a_string_streams_as_written_and_a_quote_is_held_back():
    """A string's text streams as it comes; the beginning of a ``<|"|>`` quote is held back,
    and a closed string's call is not done until its closer may no longer be on its way."""
    head = f"<|tool_call>call:note{{text:{Q}Hello <|"
    parts, end = FMT.partial(head, TOOLS)
    assert (parts[0].args, parts[0].done, end) == ('{"text": "Hello ', False, 0)
    parts, _ = FMT.partial(head + '"|>}', TOOLS)
    assert parts[0].args == '{"text": "Hello "}' and not parts[0].done


def test_the_grammar_writes_nested_arguments_in_gemmas_syntax(vocab):
    """A list of objects, a boolean and enums are forced valid, written in Gemma's syntax
    (no JSON quotes)."""
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
    spec = reply_grammar(lit=vocab[2], fmt=FMT, tools=tool, choice=ToolChoice("required"), parallel=False)
    for seed in range(3):
        text = drive(vocab, spec, "", 400, seed)
        (c,) = split(text, fmt=FMT, tools=tool).calls
        a = json.loads(c.arguments)
        assert a["zone"] in ("eu", "us") and set(a) <= {"stops", "rail", "zone"}, text
        assert isinstance(a.get("rail", True), bool) and isinstance(a.get("stops", []), list), text
        assert all(s["kind"] in ("city", "beach") and 1 <= s.get("nights", 1) <= 9 for s in a.get("stops", [])), text
        assert '"' not in text.replace(Q, ""), text  # Gemma's syntax, not JSON
