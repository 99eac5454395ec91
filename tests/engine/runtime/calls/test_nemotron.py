"""Nemotron Nano v2's calls, ``<TOOLCALL>[{"name": NAME, "arguments": {...}}, …]</TOOLCALL>``,
beyond the contract every format keeps (test_contract.py): the example of the format in
its system prompt, and a reply after thinking with its arguments as a JSON string."""

from __future__ import annotations

from engine.runtime.prompt.calls.jsoncalls.nemotron import NEMOTRON as FMT
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import split
from tests.callharness import TRAVEL_CALLS as CALLS, TRAVEL_TOOLS as TOOLS, travel_conversation as conversation
from tests.callharness import check_stream, pairs, render, templates


def test_the_system_prompts_example_of_the_format_is_no_call():
    """The template's system prompt shows the format (with doubled braces) before the
    assistant's turn: the opener is found there, but no call is read from it."""
    source = templates()["NVIDIA-Nemotron-Nano-v2.jinja"]
    text = render(source, conversation(CALLS), tools=[t.to_template() for t in TOOLS], add_generation_prompt=False)
    turn = text.index("<SPECIAL_11>Assistant")
    assert 0 <= FMT.find(text) < turn
    assert not FMT.scan(text[FMT.find(text) :], TOOLS)[0]
    i = turn + FMT.find(text[turn:])
    assert i >= turn and pairs(FMT.scan(text[i:], TOOLS)[0]) == CALLS


def test_a_reply_after_thinking_and_arguments_as_a_json_string():
    """The generation prompt opens <think>; the template's instructions show "arguments" as
    a string: the thinking is reasoning, the string's object the call's arguments (sent
    whole when streamed)."""
    text = (
        'The user wants weather.</think>\n\n<TOOLCALL>[{"name": "get_weather", "arguments": '
        '"{\\"city\\": \\"Oslo\\"}"}]</TOOLCALL>'
    )
    r = split(text, Thinking(), True, FMT, TOOLS)
    want = ("The user wants weather.", "", [("get_weather", {"city": "Oslo"})])
    assert (r.reasoning, r.content, pairs(r.calls)) == want
    check_stream(text, FMT, TOOLS, Thinking(), True, grows=False)
