"""Kimi K3's calls, ``<|open|>call tool=…<|sep|><|open|>argument key=… type=…<|sep|>V…``, beyond
the contract every format keeps (test_contract.py, all that Kimi K2's calls need): the
grammar forcing nested schemas and a dotted tool name."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.jsoncalls.kimi import KIMI_K3 as K3
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import drive

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
    """A list of objects with bounded strings and integers, a boolean and an enum are
    forced valid, under a tool whose name holds a dot."""
    spec = reply_grammar(lit=vocab[2], fmt=K3, tools=NESTED, choice=ToolChoice("required"), parallel=False)
    for seed in range(3):
        text = drive(vocab, spec, "", 400, seed)
        r = split(text, fmt=K3, tools=NESTED)
        assert len(r.calls) == 1 and r.content == "" and r.calls[0].name == "trip.plan", text
        args = json.loads(r.calls[0].arguments)
        assert type(args["rail"]) is bool and args["unit"] in ("km", "mi") and 1 <= len(args["stops"]) <= 3, text
        for stop in args["stops"]:
            assert isinstance(stop["city"], str) and len(stop["city"]) <= 8 and 1 <= stop["nights"] <= 9, text
