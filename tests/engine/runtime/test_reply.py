"""Replies split into thinking, content and tool calls: every format's parser on recorded
and malformed outputs, streamed piece by piece as the engine emits them, and the reply
grammar (lazy calls under auto, a thinking budget) driven token by token on a real
vocabulary."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt import calls as TF
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import CALL, CONTENT, REASONING, ReplyParser, split
from engine.runtime.prompt.tools import ToolChoice, parse_tools

TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "tags": {"type": "array"}},
                    "required": ["city"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "add",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
            },
        },
    ]
)

#: replies as the model families write them (shapes from their templates and model cards)
RECORDED = {
    TF.QWEN_XML: "I will check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
    '<parameter=days>\n3\n</parameter>\n<parameter=tags>\n["sun", "wind"]\n</parameter>\n</function>\n'
    "</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n2\n"
    "</parameter>\n</function>\n</tool_call>",
    TF.HERMES: 'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3, '
    '"tags": ["sun", "wind"]}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1.5, '
    '\\"b\\": 2}"}\n</tool_call>',
    TF.LLAMA3: '<|python_tag|>{"name": "get_weather", "parameters": {"city": "San Francisco", "days": 3, "tags": '
    '["sun", "wind"]}}; {"name": "add", "parameters": {"a": 1.5, "b": 2}}',
    TF.MISTRAL: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3, "tags": '
    '["sun", "wind"]}, "id": "abcdefghi"}, {"name": "add", "arguments": {"a": 1.5, "b": 2}}]',
    TF.MISTRAL_ARGS: '[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{"city": "San Francisco", "days": 3, "tags": '
    '["sun", "wind"]}[TOOL_CALLS]add[ARGS]{"a": 1.5, "b": 2}',
    TF.DEEPSEEK: 'I will check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "San '
    'Francisco", "days": 3, "tags": ["sun", "wind"]}<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>'
    '{"a": 1.5, "b": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    TF.DEEPSEEK_R1: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": '
    '"San '
    'Francisco", "days": 3, "tags": ["sun", "wind"]}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>'
    'function<｜tool▁sep｜>add\n```json\n{"a": 1.5, "b": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    TF.FUNCTION_TAG: '<function=get_weather>{"city": "San Francisco", "days": 3, "tags": ["sun", "wind"]}</function>'
    '<function=add>{"a": 1.5, "b": 2}</function>',
    TF.GENERIC: '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3, "tags": '
    '["sun", "wind"]}}, {"name": "add", "arguments": {"a": 1.5, "b": 2}}]}',
}
WANT = [("get_weather", {"city": "San Francisco", "days": 3, "tags": ["sun", "wind"]}), ("add", {"a": 1.5, "b": 2})]


def _calls(reply) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in reply.calls]


@pytest.mark.parametrize("fmt", list(RECORDED), ids=lambda f: f.name)
def test_recorded_replies_parse_whole_and_streamed(fmt):
    text = RECORDED[fmt]
    whole = split(text, fmt=fmt, tools=TOOLS)
    assert _calls(whole) == WANT
    assert whole.content in ("", "I will check.")
    # streamed in 3-character pieces: the same calls, each emitted once, and no markup in the content
    p = ReplyParser(fmt=fmt, tools=TOOLS)
    parts = [x for i in range(0, len(text), 3) for x in p.feed(text[i : i + 3])] + p.finish()
    assert [(x.call.name, json.loads(x.call.arguments)) for x in parts if x.kind == CALL] == WANT
    assert [x.index for x in parts if x.kind == CALL] == [0, 1]
    assert "".join(x.text for x in parts if x.kind == CONTENT) == whole.content
    # the writer's own output parses back
    assert _calls(split(fmt.write(WANT), fmt=fmt, tools=TOOLS)) == WANT


@pytest.mark.parametrize("fmt", list(RECORDED), ids=lambda f: f.name)
def test_malformed_or_cut_calls_lose_nothing_and_never_raise(fmt):
    """A call whose name was written streams from then on (a client shows it as it is
    written, and what was sent is never taken back): cut by the end of the reply, it is
    delivered with its arguments as far as they were written, as OpenAI does at a length
    cut. Text that never became a call is content. Whole and streamed agree."""
    text = RECORDED[fmt]
    cut = text[: len(text) * 2 // 3]
    reply = split(cut, fmt=fmt, tools=TOOLS)
    assert reply.calls and reply.calls[0].name == "get_weather"
    full = split(text, fmt=fmt, tools=TOOLS).calls
    for got, want in zip(reply.calls, full):  # each call's arguments: a prefix of the whole reply's
        assert want.arguments.startswith(got.arguments)
    # content: what came before the calls, or a marker cut half-way at the very end
    tail = reply.content.removeprefix("I will check.").strip()
    assert not tail or (cut.endswith(tail) and any(m.startswith(tail) for m in fmt.markers)), reply.content
    broken = text.replace("get_weather", "get weather\x00{", 1) + "}}}"
    reply = split(broken, fmt=fmt, tools=TOOLS)
    assert reply.content or reply.calls
    assert len(reply.calls) <= 2
    for piece in (cut, broken):
        whole = split(piece, fmt=fmt, tools=TOOLS)
        for size in (1, 3):
            p = ReplyParser(fmt=fmt, tools=TOOLS)
            parts = [x for i in range(0, len(piece), size) for x in p.feed(piece[i : i + size])] + p.finish()
            content = "".join(x.text for x in parts if x.kind == CONTENT)
            calls = [(x.call.name, x.call.arguments) for x in parts if x.kind == CALL]
            assert (content, calls) == (whole.content, [(c.name, c.arguments) for c in whole.calls])
    # a malformed opener is content, character for character
    bad = "Let me see. " + (fmt.trigger or "{") + " this is not a call"
    reply = split(bad, fmt=fmt, tools=TOOLS)
    assert (reply.content, reply.calls) == (bad, [])


def _as_pairs(calls) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in calls]


def _assert_each_character_in_one_part(text: str, fmt, content: str, calls) -> None:
    """``text`` is the content with one stretch put back (whitespace at its seams aside),
    and that stretch, parsed on its own, is exactly ``calls``: no character is lost, none
    is both content and a call."""
    t, c = text.strip(), content.strip()
    for k in range(len(c) + 1):
        head, tail = c[:k].rstrip(), c[k:].lstrip()
        if len(head) + len(tail) > len(t) or not (t.startswith(head) and t.endswith(tail)):
            continue
        stretch = t[len(head) : len(t) - len(tail)].strip()
        if not calls and not stretch:
            return
        if calls and stretch and _as_pairs(fmt.parse(stretch, TOOLS) or []) == _as_pairs(calls):
            return
    raise AssertionError(f"{fmt.name}: {text!r} is not content {content!r} plus calls {_as_pairs(calls)}")


def test_xml_parameters_are_typed_by_the_tool_schema():
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n42\n</parameter>\n</function>\n</tool_call>"  # noqa: E501
    (call,) = split(text, fmt=TF.QWEN_XML, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": "42", "days": 42}


def test_thinking_is_split_from_content_however_the_text_is_cut():
    text = "Let me think </thin about it.</think>\n\nThe answer is 4."
    for step in (1, 2, 5, len(text)):
        p = ReplyParser(Thinking(), in_thinking=True)
        parts = [x for i in range(0, len(text), step) for x in p.feed(text[i : i + step])] + p.finish()
        assert "".join(x.text for x in parts if x.kind == REASONING) == "Let me think </thin about it."
        assert "".join(x.text for x in parts if x.kind == CONTENT) == "The answer is 4."
    # a model that opens the block itself
    r = split("<think>\nhmm\n</think>\n\nYes.", Thinking(), in_thinking=False)
    assert (r.reasoning, r.content) == ("hmm", "Yes.")
    # thinking, then a call
    r = split("plan</think>\n\n" + RECORDED[TF.QWEN_XML], Thinking(), True, TF.QWEN_XML, TOOLS)
    assert r.reasoning == "plan" and _calls(r) == WANT and r.content == "I will check."


def test_format_detection_reads_the_template_not_the_name():
    assert TF.detect("{{ '<tool_call>\\n<function=' }}<parameter=").format is TF.QWEN_XML
    assert TF.detect('{{ tools }} <tool_call> {"name": .., "arguments": ..}').format is TF.HERMES
    assert TF.detect("[TOOL_CALLS] [ARGS]").format is TF.MISTRAL_ARGS
    assert TF.detect("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}").format is TF.GENERIC


# ---------------------------------------------------------------- grammar, token by token
@pytest.fixture(scope="module")
def demo_vocab():
    from tests.callharness import demo_vocab

    return demo_vocab()


def _drive(demo_vocab, spec, prefix: str, steps: int, seed: int = 0) -> str:
    from tests.callharness import drive

    return drive(demo_vocab, spec, prefix, steps, seed)


def test_auto_tools_are_lazy_until_the_call_opens_then_the_call_is_forced_valid(demo_vocab):
    from engine.runtime.prompt.replygrammar import reply_grammar

    bounded = parse_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "pick",
                    "parameters": {
                        "type": "object",
                        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                        "required": ["n"],
                    },
                },
            }
        ]
    )
    spec = reply_grammar(lit=demo_vocab[2], fmt=TF.QWEN_XML, tools=bounded, choice=ToolChoice("auto"))
    free = _drive(demo_vocab, spec, "", 40)
    assert "<tool_call>" not in free  # free text: the model was not pushed into a call
    called = _drive(demo_vocab, spec, "Sure, checking. <tool_call>", 400)
    r = split(called, fmt=TF.QWEN_XML, tools=bounded)
    assert [c.name for c in r.calls] == ["pick"] and 0 <= json.loads(r.calls[0].arguments)["n"] <= 9


def test_a_thinking_budget_forces_the_end_marker(demo_vocab):
    from engine.runtime.prompt.replygrammar import reply_grammar

    spec = reply_grammar(lit=demo_vocab[2], thinking=Thinking(), budget=7)
    text = _drive(demo_vocab, spec, "", 60)
    head, _, tail = text.partition("</think>")
    assert _ and len(demo_vocab[0].tokenize(head, parse_special=False)) <= 7
    assert reply_grammar(lit=demo_vocab[2], thinking=Thinking()) is None  # no budget, no constraint: no grammar


def test_control_token_markers_are_shown_as_text_for_the_parser(demo_vocab):
    """``[TOOL_CALLS]``, ``<|python_tag|>`` and DeepSeek's markers are control tokens in their
    vocabularies, which render as nothing; the decode shows them (DecodeParams.shown_tokens)."""
    from engine.runtime.llama.vocab import shown_markers

    m = demo_vocab[0]
    (control,) = m.tokenize("<|im_start|>", parse_special=True)
    assert m.piece(control) == b""  # a control token renders as nothing by default
    assert shown_markers(m, ("<|im_start|>", "plain text")) == {control}
    assert set(TF.DEEPSEEK.markers) >= set(TF.DEEPSEEK_MARKERS) and "[ARGS]" in TF.MISTRAL_ARGS.markers


@pytest.mark.parametrize("fmt", list(RECORDED), ids=lambda f: f.name)
def test_arguments_stream_as_they_are_written_and_join_into_the_call(fmt):
    from tests.callharness import check_stream

    # Hermes' second call writes its arguments as one JSON string: sent when whole
    check_stream(RECORDED[fmt], fmt, TOOLS, grows=fmt is not TF.HERMES)
    check_stream(fmt.write(WANT), fmt, TOOLS)


def test_json_arguments_are_spaced_as_json_dumps_spaces_them_as_they_come():
    from engine.runtime.prompt.calls.partial import json_prefix

    raw = '{"a":1,"b" : [true,null, "x\\"y\\u00e9"],"c":{}}'
    want = json.dumps(json.loads(raw), ensure_ascii=False)
    assert json_prefix(raw) == (want, len(raw))
    seen = ""
    for n in range(len(raw)):
        got, end = json_prefix(raw[:n])
        assert end is None and got.startswith(seen) and want.startswith(got), (n, got)
        seen = got


@pytest.mark.parametrize(
    "markers",
    [("<think>", "</think>"), ("<|channel>thought", "<channel|>"), ("<|channel|>analysis<|message|>", "<|end|>")],
)
def test_a_budget_bounds_a_think_block_the_model_opens_itself(demo_vocab, markers):
    """Qwen3, Gemma 4 and harmony models open their thinking themselves (the prompt does
    not): once opened, the budget holds and the family's own end marker closes it."""
    from engine.runtime.prompt.replygrammar import reply_grammar

    start, end = markers
    spec = reply_grammar(lit=demo_vocab[2], may_open=Thinking(start, end), budget=7)
    text = _drive(demo_vocab, spec, start, 80)
    head, sep, _ = text[len(start) :].partition(end)
    assert sep and len(demo_vocab[0].tokenize(head, parse_special=False)) <= 7, text
    free = _drive(demo_vocab, spec, "Hello", 30)  # a reply that does not open it is free text
    assert free.startswith("Hello") and not free.startswith(start)
    assert reply_grammar(lit=demo_vocab[2], may_open=Thinking(start, end)) is None  # no budget: nothing to bound


def test_a_forced_call_still_lets_a_model_that_opens_its_thinking_think_first(demo_vocab):
    """Qwen3 opens ``<think>`` itself: under ``tool_choice: required`` it may still think
    (within the budget) before the call, which then follows in full."""
    from engine.runtime.prompt.replygrammar import reply_grammar

    pick = parse_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "pick",
                    "parameters": {
                        "type": "object",
                        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                        "required": ["n"],
                    },
                },
            }
        ]
    )
    spec = reply_grammar(
        lit=demo_vocab[2], fmt=TF.HERMES, tools=pick, choice=ToolChoice("required"), may_open=Thinking(), budget=6
    )
    text = _drive(demo_vocab, spec, "<think>", 300)
    r = split(text, Thinking(), False, TF.HERMES, pick)
    assert r.reasoning and r.calls and all(c.name == "pick" and 0 <= json.loads(c.arguments)["n"] <= 9 for c in r.calls)
    direct = _drive(demo_vocab, spec, "", 300, seed=1)  # thinking or not, the calls follow
    assert split(direct, Thinking(), False, TF.HERMES, pick).calls
