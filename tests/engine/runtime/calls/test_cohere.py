"""The Cohere call family (Command R7B, Cohere2 MoE): calls through the real templates and
back, replies as the models write them (whole and streamed), malformed ones, and the
grammar driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt import calls as TF
from engine.runtime.prompt.calls.jsoncalls.cohere import COHERE, THINKING
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import ReplyParser, split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, drive, pairs, render, templates
from tests.callharness import DESCRIBED_TRIP_TOOLS as TOOLS

FMT = COHERE
MINE = ("Cohere2MoE.jinja", "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja")

WEATHER = ("get_weather", {"city": "San Francisco", "days": 3})
TRIP = ("plan_trip", {"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": {"budget": 1200.5}})


def _call(i: int, name: str, args: dict) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}


# ------------------------------------------------------------------ template
@pytest.mark.parametrize("name", MINE)
def test_calls_round_trip_through_the_real_template(name):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather, then a trip?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(0, *WEATHER), _call(1, *TRIP)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
    ]
    text = render(templates()[name], messages, tools=[t.to_template() for t in TOOLS], add_generation_prompt=False)
    turn = text.index("<|CHATBOT_TOKEN|>")  # R7B's system preamble names <|START_ACTION|> too
    i = turn + FMT.find(text[turn:])
    calls, end = FMT.scan(text[i:], TOOLS)
    assert pairs(calls) == [WEATHER, TRIP]
    assert text[i + end :].startswith("<|END_OF_TURN_TOKEN|>")  # the list and <|END_ACTION|> are the calls'
    assert FMT.find(text[i + end :]) == -1
    written = FMT.write([WEATHER, TRIP])
    assert written == text[i : i + end]  # written exactly as the template writes them
    assert pairs(split(written, fmt=FMT, tools=TOOLS).calls) == [WEATHER, TRIP]


def test_detects_its_templates_and_no_other():
    for name, source in templates().items():
        assert FMT.detects(source) == (name in MINE), name
        if name in MINE:  # no other format claims them, wherever the registry puts this one
            assert [f.name for f in TF.FORMATS if f.detects(source) and f not in (FMT, TF.GENERIC)] == [], name


# ------------------------------------------------------------------ recorded
ONE = (
    '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Zürich '
    '\\"Altstadt\\"\\nNord ☀", "days": 3, "unit": "celsius"}}\n]<|END_ACTION|>'
)
TWO = (
    '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Zürich '
    '\\"Altstadt\\"\\nNord ☀", "days": 3, "unit": "celsius"}},\n    {"tool_call_id": "1", "tool_name": '
    '"plan_trip", "parameters": {"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": '
    '{"budget": 1200.5}}}\n]<|END_ACTION|>'
)
ONE_ARGS = {"city": 'Zürich "Altstadt"\nNord ☀', "days": 3, "unit": "celsius"}


def test_recorded_replies_parse_and_stream():
    for text, want in ((ONE, [("get_weather", ONE_ARGS)]), (TWO, [("get_weather", ONE_ARGS), TRIP])):
        r = split(text, fmt=FMT, tools=TOOLS)
        assert (r.content, pairs(r.calls)) == ("", want)
        check_stream(text, FMT, TOOLS)
    # keys in another order, compact: the call is the same
    other = (
        '<|START_ACTION|>[{"parameters":{"city":"Paris"},"tool_name":"get_weather","tool_call_id":"0"}]<|END_ACTION|>'
    )
    assert pairs(split(other, fmt=FMT, tools=TOOLS).calls) == [("get_weather", {"city": "Paris"})]
    check_stream(other, FMT, TOOLS, grows=False)  # its arguments come before its name: sent whole
    # the plan as thinking (the template's markers), then the calls
    think = Thinking(*THINKING)
    planned = "<|START_THINKING|>I will look up the weather.<|END_THINKING|>" + ONE
    r = split(planned, think, False, FMT, TOOLS)
    assert (r.reasoning, r.content, pairs(r.calls)) == ("I will look up the weather.", "", [("get_weather", ONE_ARGS)])
    check_stream(planned, FMT, TOOLS, thinking=think)


def test_malformed_replies_lose_nothing_and_never_raise():
    for text in (
        '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_wea',  # cut inside the name
        '<|START_ACTION|>{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {}}<|END_ACTION|>',
        '<|START_ACTION|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|END_ACTION|>',
        '<|START_ACTION|>[{"tool_name": 7, "parameters": {}}]<|END_ACTION|>',
        "Let me see. " + FMT.trigger + " this is not a call",
    ):
        r = split(text, fmt=FMT, tools=TOOLS)
        assert (r.content, r.calls) == (text, []), text
        check_stream(text, FMT, TOOLS)
    # the list closed without <|END_ACTION|>, or something after it: the calls, the rest as content
    for tail, content in (("", ""), ("<|END_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>")):
        text = ONE.removesuffix("<|END_ACTION|>") + tail
        r = split(text, fmt=FMT, tools=TOOLS)
        assert (r.content, pairs(r.calls)) == (content, [("get_weather", ONE_ARGS)]), text
        check_stream(text, FMT, TOOLS)
    # a wrong separator after the first call: that call, the rest as content
    text = TWO.replace("}},\n", "}};\n", 1)
    r = split(text, fmt=FMT, tools=TOOLS)
    assert pairs(r.calls) == [("get_weather", ONE_ARGS)] and r.content.startswith(";\n    {")
    check_stream(text, FMT, TOOLS)
    # cut inside the arguments: the calls as far as they were written, whole or streamed alike
    cut = TWO[: TWO.index("Reno")]
    whole = split(cut, fmt=FMT, tools=TOOLS)
    assert [c.name for c in whole.calls] == ["get_weather", "plan_trip"] and whole.content == ""
    assert json.dumps(TRIP[1], ensure_ascii=False).startswith(whole.calls[1].arguments)
    for size in (1, 3, 7):
        p = ReplyParser(fmt=FMT, tools=TOOLS)
        for i in range(0, len(cut), size):
            p.feed(cut[i : i + size])
        p.finish()
        assert [(c.name, c.arguments) for c in p.reply.calls] == [(c.name, c.arguments) for c in whole.calls]
    # on every prefix, what was sent is never taken back and a done call is final
    sent: dict[int, str] = {}
    final = FMT.partial(TWO, TOOLS)[0]
    for k in range(len(TWO) + 1):
        for i, c in enumerate(FMT.partial(TWO[:k], TOOLS)[0]):
            assert c.args.startswith(sent.get(i, "")) and (not c.done or c == final[i]), (k, c)
            sent[i] = c.args


# ------------------------------------------------------------------ grammar
PICK = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "pick",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "color": {"type": "string", "enum": ["red", "green", "blue"]},
                        "n": {"type": "integer", "minimum": 0, "maximum": 9},
                        "note": {"type": "string", "maxLength": 12},
                    },
                    "required": ["color", "n"],
                },
            },
        }
    ]
)


@pytest.fixture(scope="module")
def vocab():
    from tests.callharness import demo_vocab

    return demo_vocab()


def _valid(text: str) -> list[dict]:
    r = split(text, fmt=FMT, tools=PICK)
    assert r.calls and not r.content.strip(), text
    out = []
    for c in r.calls:
        a = json.loads(c.arguments)
        assert c.name == "pick" and a["color"] in ("red", "green", "blue") and 0 <= a["n"] <= 9, text
        assert set(a) <= {"color", "n", "note"} and isinstance(a.get("note", ""), str), text
        out.append(a)
    return out


def test_the_grammar_forces_valid_calls(vocab):
    spec = reply_grammar(lit=vocab[2], fmt=FMT, tools=PICK, choice=ToolChoice("required"))
    for seed in range(3):
        text = drive(vocab, spec, "", 400, seed)
        assert text.startswith('<|START_ACTION|>[{"tool_call_id":"'), text
        _valid(text)
    one = reply_grammar(lit=vocab[2], fmt=FMT, tools=PICK, choice=ToolChoice("required"), parallel=False)
    for seed in range(2):
        text = drive(vocab, one, "", 400, seed)
        assert len(_valid(text)) == 1 and text.rstrip().endswith("]<|END_ACTION|>"), text


def test_auto_is_free_text_until_the_call_opens(vocab):
    spec = reply_grammar(lit=vocab[2], fmt=FMT, tools=PICK, choice=ToolChoice("auto"))
    text = drive(vocab, spec, "Sure. " + FMT.trigger, 400, 1)
    r = split(text, fmt=FMT, tools=PICK)
    assert r.content == "Sure." and len(_valid(text[len("Sure. ") :])) >= 1
