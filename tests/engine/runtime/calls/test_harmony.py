"""The OpenAI harmony call family (gpt-oss) beyond the contract every format keeps
(test_contract.py): one call per assistant turn in the template, every header form a call
may have, the answer and the thinking that are not calls, and the <|call|> that ends
generation unseen."""

from __future__ import annotations

import pytest

from engine.runtime.prompt.calls.jsoncalls.harmony import FINAL_HEADERS, HARMONY as FMT
from engine.runtime.prompt.reply import split
from tests.callharness import DESCRIBED_TRIP_TOOLS as TOOLS
from tests.callharness import check_stream, pairs, render, templates
from tests.engine.runtime.calls.families import partials_only_grow
from tests.engine.runtime.calls.families_json import HA_ONE, QUOTED, TRIP, WEATHER

TEMPLATE = "openai-gpt-oss-120b.jinja"


def _call(i: int, name: str, args: dict) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


def _all_calls(text: str) -> list[tuple[str, dict]]:
    """Every call in a rendered conversation: found, scanned, then looked for again after."""
    out, pos = [], 0
    while (i := FMT.find(text[pos:])) >= 0:
        calls, end = FMT.scan(text[pos + i :], TOOLS)
        assert calls, text[pos + i : pos + i + 200]
        out += pairs(calls)
        pos += i + end
    return out


def test_the_template_renders_one_call_per_assistant_turn():
    """Each call in its own assistant turn is rendered with the recipient in the role header
    and read back; two calls in one message render the first only (the engine gives each
    call its own turn: ``one_call_per_turn``); the writer writes several calls as that many
    turns, and they parse back."""
    source, tools = templates()[TEMPLATE], [t.to_template() for t in TOOLS]
    head = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather, then a trip?"}]
    turns = head + [
        {"role": "assistant", "content": "", "tool_calls": [_call(0, *WEATHER)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "assistant", "content": "", "tool_calls": [_call(1, *TRIP)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
    ]
    text = render(source, turns, tools=tools, add_generation_prompt=False)
    assert "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>" in text
    assert _all_calls(text) == [WEATHER, TRIP]
    both = head + [
        {"role": "assistant", "content": "", "tool_calls": [_call(0, *WEATHER), _call(1, *TRIP)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
    ]
    assert FMT.one_call_per_turn
    assert _all_calls(render(source, both, tools=tools, add_generation_prompt=False)) == [WEATHER]
    written = FMT.write([WEATHER, TRIP])
    assert written.startswith("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>")
    assert pairs(split(written, fmt=FMT, tools=TOOLS).calls) == [WEATHER, TRIP]
    assert FMT.parse(written, TOOLS) is not None


def test_a_reply_whose_closing_call_token_is_not_shown_is_the_same_call():
    """<|call|> ends generation: a reply whose last token is not shown is the same call,
    whole and streamed, though the scan alone does not close it (the parser closes it at the
    reply's end)."""
    cut = HA_ONE.removesuffix("<|call|>")
    assert pairs(split(cut, fmt=FMT, tools=TOOLS).calls) == [("get_weather", QUOTED)]
    check_stream(cut, FMT, TOOLS)
    assert FMT.scan(cut, TOOLS) == ([], 0)


@pytest.mark.parametrize(
    "text, content",
    [
        # the recipient in the role header, as the template renders calls (at the reply's start)
        (' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>', ""),
        # after thinking, the call is a new message; content stops before its role header
        (
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather<|constrain|>json<|message|>{"city": "Paris"}<|call|>',
            "<|channel|>analysis<|message|>Need weather.<|end|>",
        ),
        ('<|channel|>analysis to=functions.get_weather code<|message|>{"city": "Paris"}<|call|>', ""),
        ('<|start|>assistant to=functions.get_weather<|channel|>commentary<|message|>{"city": "Paris"}<|call|>', ""),
    ],
)
def test_every_header_form_is_a_call(text, content):
    """Wherever the recipient stands in the header, the message is a call, streamed as it
    grows; a header form other than the trigger's is held back while it may become one."""
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, [("get_weather", {"city": "Paris"})])
    assert [p.done for p in partials_only_grow(FMT, text[FMT.find(text) :], TOOLS)] == [True]
    # a header form other than the trigger's streams once the parser holds back by
    # FMT.held: every prefix of any header is held
    i = FMT.find(text)
    for k in range(i, text.index("<|message|>", i)):
        assert FMT.held(text[:k]) >= k - i or FMT.find(text[:k]) == i, (k, text[:k])


def test_the_answer_and_the_thinking_are_not_calls():
    """The final channel, analysis and commentary without a recipient, and the recipient
    in plain text are no calls, and nothing of them is held back; the beginnings of a
    header are."""
    for text in (
        "<|channel|>final<|message|>It is sunny.",
        "<|start|>assistant<|channel|>final<|message|>Sunny.",
        "<|channel|>analysis<|message|>to=functions.x is a tool<|end|>",
        "<|channel|>commentary<|message|>Checking the weather now.<|end|>",
        "I wrote to=functions.x here",
    ):
        assert FMT.find(text) == -1, text
        assert FMT.held(text) == 0, text
    assert FINAL_HEADERS == ("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>")
    assert FMT.held("Sure. <|start|>assistant<|chan") == len("<|start|>assistant<|chan")
    assert FMT.held("<|start|>assistant to=func") == len("<|start|>assistant to=func")
    assert FMT.held(" to=fu") == len(" to=fu")


def test_a_second_analysis_message_is_thinking_too():
    """gpt-oss may write several analysis messages before its answer: each is thinking,
    and none of their headers reaches the content."""
    from engine.runtime.prompt import reasoning

    thinking = reasoning.detect(templates()[TEMPLATE])
    text = (
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>analysis<|message|>more<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Answer"
    )
    r = split(text, thinking, False, FMT, ())
    assert (r.reasoning, r.content) == ("think\n\nmore", "Answer")
    check_stream(text, FMT, (), thinking, False)
