"""The OpenAI harmony call family (gpt-oss): calls through the real template and back,
replies as the model writes them (whole and streamed), malformed ones, and the grammar
driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt import calls as TF
from engine.runtime.prompt.calls.jsoncalls.harmony import FINAL_HEADERS, HARMONY
from engine.runtime.prompt.reply import ReplyParser, split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from tests.callharness import check_stream, drive, pairs, render, templates
from tests.callharness import DESCRIBED_TRIP_TOOLS as TOOLS

FMT = HARMONY
MINE = ("openai-gpt-oss-120b.jinja",)

WEATHER = ("get_weather", {"city": "San Francisco", "days": 3})
TRIP = ("plan_trip", {"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": {"budget": 1200.5}})


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


# ------------------------------------------------------------------ template
def test_calls_round_trip_through_the_real_template():
    source = templates()["openai-gpt-oss-120b.jinja"]
    tools = [t.to_template() for t in TOOLS]
    head = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather, then a trip?"}]
    # the template renders one call per assistant message: each call is its own turn
    turns = head + [
        {"role": "assistant", "content": "", "tool_calls": [_call(0, *WEATHER)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "assistant", "content": "", "tool_calls": [_call(1, *TRIP)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
    ]
    text = render(source, turns, tools=tools, add_generation_prompt=False)
    assert "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>" in text
    assert _all_calls(text) == [WEATHER, TRIP]
    # two calls in one message: the template renders the first only (the engine must
    # give each call its own assistant turn)
    both = head + [
        {"role": "assistant", "content": "", "tool_calls": [_call(0, *WEATHER), _call(1, *TRIP)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
    ]
    assert _all_calls(render(source, both, tools=tools, add_generation_prompt=False)) == [WEATHER]
    # the writer writes calls as the template does, and they parse back
    written = FMT.write([WEATHER, TRIP])
    assert written.startswith("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>")
    assert pairs(split(written, fmt=FMT, tools=TOOLS).calls) == [WEATHER, TRIP]
    assert FMT.parse(written, TOOLS) is not None


def test_detects_its_template_and_no_other():
    for name, source in templates().items():
        assert FMT.detects(source) == (name in MINE), name
        if name in MINE:  # no other format claims it, wherever the registry puts this one
            assert [f.name for f in TF.FORMATS if f.detects(source) and f not in (FMT, TF.GENERIC)] == [], name


# ------------------------------------------------------------------ recorded
#: replies as gpt-oss writes them after the generation prompt ``<|start|>assistant``
ONE = (
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Zürich \\"Altstadt\\"\\n'
    'Nord ☀","days":3,"unit":"celsius"}<|call|>'
)
TWO = ONE + (
    "<|start|>assistant<|channel|>commentary to=functions.plan_trip <|constrain|>json<|message|>"
    '{"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": {"budget": 1200.5}}<|call|>'
)
ONE_ARGS = {"city": 'Zürich "Altstadt"\nNord ☀', "days": 3, "unit": "celsius"}


def test_recorded_replies_parse_and_stream():
    for text, want in ((ONE, [("get_weather", ONE_ARGS)]), (TWO, [("get_weather", ONE_ARGS), TRIP])):
        r = split(text, fmt=FMT, tools=TOOLS)
        assert (r.content, pairs(r.calls)) == ("", want)
        check_stream(text, FMT, TOOLS)
    # <|call|> ends generation: a reply whose last token is not shown is the same call
    cut = ONE.removesuffix("<|call|>")
    assert pairs(split(cut, fmt=FMT, tools=TOOLS).calls) == [("get_weather", ONE_ARGS)]
    check_stream(cut, FMT, TOOLS)
    assert FMT.scan(cut, TOOLS) == ([], 0)  # not closed: the parser closes it at the reply's end


def _grows(text: str) -> list:
    """``FMT.partial`` on every prefix of ``text``: what was sent is never taken back, and a
    call is done only with its final arguments."""
    sent: dict[int, str] = {}
    final = FMT.partial(text, TOOLS)[0]
    for k in range(len(text) + 1):
        for i, p in enumerate(FMT.partial(text[:k], TOOLS)[0]):
            assert p.args.startswith(sent.get(i, "")), (k, p)
            sent[i] = p.args
            assert not p.done or p == final[i], (k, p)
    return final


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
    r = split(text, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == (content, [("get_weather", {"city": "Paris"})])
    assert [p.done for p in _grows(text[FMT.find(text) :])] == [True]
    # a header form other than the trigger's streams once the parser holds back by
    # FMT.held: every prefix of any header is held
    i = FMT.find(text)
    for k in range(i, text.index("<|message|>", i)):
        assert FMT.held(text[:k]) >= k - i or FMT.find(text[:k]) == i, (k, text[:k])


def test_the_answer_and_the_thinking_are_not_calls():
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


def test_malformed_replies_lose_nothing_and_never_raise():
    name_cut = "<|channel|>commentary to=functions.get_wea"
    wrong = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|end|>{"city": "Paris"}<|call|>'
    garbage = "Let me see. " + FMT.trigger + " this is not a call"
    no_args = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>sunny please<|call|>"
    for text in (name_cut, wrong, garbage, no_args):
        r = split(text, fmt=FMT, tools=TOOLS)
        assert (r.content, r.calls) == (text, []), text
        check_stream(text, FMT, TOOLS)
    # whole arguments, then not <|call|>: the call, then the rest as content
    other_end = ONE.replace("<|call|>", "<|end|>")
    r = split(other_end, fmt=FMT, tools=TOOLS)
    assert (r.content, pairs(r.calls)) == ("<|end|>", [("get_weather", ONE_ARGS)])
    check_stream(other_end, FMT, TOOLS)
    # cut inside the arguments: the call as far as it was written, whole or streamed alike
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
    _grows(TWO)


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
    assert r.calls, text
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
        assert text.startswith(FMT.trigger + "pick <|constrain|>json<|message|>{"), text
        _valid(text)
    one = reply_grammar(lit=vocab[2], fmt=FMT, tools=PICK, choice=ToolChoice("required"), parallel=False)
    for seed in range(2):
        text = drive(vocab, one, "", 400, seed)
        assert len(_valid(text)) == 1 and text.rstrip().endswith("<|call|>"), text


def test_auto_is_free_text_until_the_call_opens(vocab):
    spec = reply_grammar(lit=vocab[2], fmt=FMT, tools=PICK, choice=ToolChoice("auto"))
    text = drive(vocab, spec, "Sure. " + FMT.trigger, 400, 1)
    assert len(_valid(text)) >= 1 and split(text, fmt=FMT, tools=PICK).content == "Sure."


def test_a_second_analysis_message_is_thinking_too():
    """gpt-oss may write several analysis messages before its answer: each is thinking,
    and none of their headers reaches the content."""
    from engine.runtime.prompt import reasoning
    from tests.callharness import check_stream, templates

    thinking = reasoning.detect(templates()["openai-gpt-oss-120b.jinja"])
    text = (
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>analysis<|message|>more<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Answer"
    )
    r = split(text, thinking, False, HARMONY, ())
    assert (r.reasoning, r.content) == ("think\n\nmore", "Answer")
    check_stream(text, HARMONY, (), thinking, False)
