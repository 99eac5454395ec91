"""The contract every call format in the registry keeps, each checked with its own data
(families_json.py, families_param.py, families_minimax.py): the calls of a conversation
rendered through its real templates parse back, and the writer writes them as the
templates do; it is detected from its own templates and no other; the replies its models
write split into content and calls, whole and streamed; malformed and cut replies lose
nothing; and the grammar forces valid calls, with markers as text or as control tokens,
driven by a random model."""

from __future__ import annotations

import json

import pytest

from engine.runtime.prompt import calls as TF
from engine.runtime.prompt.calls.base import ToolFormat
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice
from tests.callharness import check_stream, drive, pairs, render, streamed, templates
from tests.engine.runtime.calls.families import PICK, Call, Family, partials_only_grow
from tests.engine.runtime.calls.families_json import JSON_FAMILIES
from tests.engine.runtime.calls.families_minimax import MINIMAX_FAMILIES
from tests.engine.runtime.calls.families_param import PARAM_FAMILIES

#: the formats whose tests predate this contract: their replies are checked in
#: tests/engine/runtime/test_reply.py, their templates in test_real_templates.py
CHECKED_ELSEWHERE = (
    TF.QWEN_XML,
    TF.SEED_XML,
    TF.HERMES,
    TF.LLAMA3,
    TF.MISTRAL,
    TF.MISTRAL_ARGS,
    TF.DEEPSEEK,
    TF.DEEPSEEK_R1,
    TF.FUNCTION_TAG,
    TF.GENERIC,
)
FAMILIES = {family.fmt.name: family for family in (*JSON_FAMILIES, *PARAM_FAMILIES, *MINIMAX_FAMILIES)}
#: the registry's formats, in its order, that this contract checks
FORMATS = [f for f in TF.FORMATS if f not in CHECKED_ELSEWHERE]


def test_every_registered_format_has_contract_data():
    """Every format in the registry has its data here, or is one of those checked
    elsewhere: a format added to the registry fails here (and in every contract test)
    until its data is written. Every data names a format the registry holds."""
    registered = {f.name: f for f in TF.FORMATS}
    elsewhere = {f.name for f in CHECKED_ELSEWHERE}
    assert elsewhere <= set(registered) and elsewhere.isdisjoint(FAMILIES)
    assert sorted(set(registered) - elsewhere) == sorted(FAMILIES)
    assert all(registered.get(name) is family.fmt for name, family in FAMILIES.items())


@pytest.fixture(params=FORMATS, ids=lambda f: f.name)
def family(request) -> Family:
    fmt: ToolFormat = request.param
    assert fmt.name in FAMILIES, f"{fmt.name}: no contract data (families_*.py)"
    return FAMILIES[fmt.name]


def as_written(calls: list[Call]) -> list[tuple[str, str]]:
    """Expected calls as the parsers write them: arguments as ``json.dumps`` spaces them."""
    return [(name, args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)) for name, args in calls]


def got(calls) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in calls]


# ------------------------------------------------------------------ templates
def test_calls_round_trip_through_the_real_templates(family):
    """A conversation's calls rendered by each real template are found after the user's
    message (the description of the tools before it shows the opener in some), read to the
    text the template writes after them, with no call after; the writer writes them as the
    template does, and what it writes parses back."""
    fmt, tools = family.fmt, family.tools
    messages = family.conversation(family.calls)
    user = [m["content"] for m in messages if m["role"] == "user"][-1]
    written = fmt.write(family.calls)
    for name, after in family.templates.items():
        text = render(templates()[name], messages, tools=[t.to_template() for t in tools], add_generation_prompt=False)
        assert (fmt.find(text[: text.index(user)]) >= 0) == (name in family.shown_in_prompt), name
        turn = text[text.index(user) + len(user) :]
        i = fmt.find(turn)
        calls, end = fmt.scan(turn[i:], tools)
        assert i >= 0 and pairs(calls) == family.calls, name
        assert turn[i + end :].startswith(after), (name, turn[i + end : i + end + 40])
        assert fmt.find(turn[i + end :]) == -1, name
        assert turn[i:].startswith(written), name
    assert pairs(fmt.parse(written, tools)) == family.calls
    assert pairs(split(written, fmt=fmt, tools=tools).calls) == family.calls


def test_only_its_own_templates_are_detected(family):
    """The format is detected from its templates' text and no other template's; the
    registry picks it for them, and no other format (but the generic one) claims them."""
    fmt, sources = family.fmt, templates()
    assert sorted(name for name, src in sources.items() if fmt.detects(src)) == sorted(family.templates)
    for name in family.templates:
        assert TF.detect(sources[name]).format is fmt, name
        assert [f.name for f in TF.FORMATS if f.detects(sources[name]) and f not in (fmt, TF.GENERIC)] == [], name


# ------------------------------------------------------------------ replies
def test_recorded_replies_split_whole_and_streamed(family):
    """Replies as the models write them split into their content and calls, the calls read
    to the reply's end; fed in pieces they split the same, each call's arguments streaming
    as they are written."""
    fmt, tools = family.fmt, family.tools
    for reply in family.replies:
        r = split(reply.text, fmt=fmt, tools=tools)
        assert (r.content, got(r.calls)) == (reply.content, as_written(reply.calls)), reply.text
        start = fmt.find(reply.text)
        calls, end = fmt.scan(reply.text[start:], tools)
        assert got(calls) == as_written(reply.calls) and start + end == len(reply.text), reply.text
        check_stream(reply.text, fmt, tools, grows=reply.grows)


def test_what_was_streamed_is_never_taken_back(family):
    """On every prefix of a reply the calls so far only grow: what was sent of a call's
    arguments is never taken back, and a call is done only with its final arguments."""
    fmt = family.fmt
    for reply in family.replies:
        final = partials_only_grow(fmt, reply.text[fmt.find(reply.text) :], family.tools)
        assert [(c.name, c.args) for c in final] == as_written(reply.calls), reply.text


def test_malformed_replies_lose_nothing(family):
    """A malformed reply never raises: the calls that are whole are calls, the rest is
    content, character for character; streamed, it splits the same."""
    fmt, tools = family.fmt, family.tools
    for reply in family.malformed:
        r = split(reply.text, fmt=fmt, tools=tools)
        assert (r.content, got(r.calls)) == (reply.content, as_written(reply.calls)), reply.text
        check_stream(reply.text, fmt, tools, grows=reply.grows)


def test_a_reply_cut_in_the_arguments_keeps_them_as_far_as_written(family):
    """A reply that breaks off inside a call's arguments delivers the call with them as far
    as they were written (a marker's beginning held back), whole and streamed alike."""
    fmt, tools = family.fmt, family.tools
    for reply in family.cut:
        want = (reply.content, as_written(reply.calls))
        r = split(reply.text, fmt=fmt, tools=tools)
        assert (r.content, got(r.calls)) == want, reply.text
        for size in (1, 3, 7):
            _, r = streamed(reply.text, fmt, tools, size=size)
            assert (r.content, got(r.calls)) == want, (size, reply.text)


# ------------------------------------------------------------------ grammar
def valid_picks(calls) -> None:
    """Calls of :data:`PICK` that keep its schema."""
    assert calls
    for c in calls:
        args = json.loads(c.arguments)
        assert c.name == "pick" and set(args) <= {"mode", "n", "note"}, args
        assert args["mode"] in ("fast", "slow") and type(args["n"]) is int and 0 <= args["n"] <= 9, args
        assert isinstance(args.get("note", ""), str) and len(args.get("note", "")) <= 12, args


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "one"])
def test_required_calls_are_valid_for_the_schema(vocab, family, parallel):
    """Under ``required`` a random model writes calls and nothing else, as the format opens
    and closes them, valid for the schema; one call where calls are not parallel."""
    fmt = family.fmt
    spec = reply_grammar(lit=vocab[2], fmt=fmt, tools=PICK, choice=ToolChoice("required"), parallel=parallel)
    for seed in range(4):
        text = drive(vocab, spec, "", 600, seed)
        r = split(text, fmt=fmt, tools=PICK)
        valid_picks(r.calls)
        assert r.content == "" and (parallel or len(r.calls) == 1), text
        assert text.startswith(family.opens) and text.rstrip().endswith(family.closes), text


def test_auto_calls_are_free_text_until_the_opener_then_valid(vocab, family):
    """Under ``auto`` the reply is free text (a random model does not happen on the opener);
    once the opener is written the call is forced valid, and the text before it is content."""
    fmt = family.fmt
    spec = reply_grammar(lit=vocab[2], fmt=fmt, tools=PICK, choice=ToolChoice("auto"))
    free = drive(vocab, spec, "", 40)
    assert fmt.openers and not any(opener in free for opener in fmt.openers), free
    for seed in range(2):
        text = drive(vocab, spec, "Sure. " + fmt.trigger, 400, seed)
        r = split(text, fmt=fmt, tools=PICK)
        valid_picks(r.calls)
        assert r.content == "Sure.", text


def test_the_grammar_takes_a_marker_that_is_a_control_token(vocab, family):
    """Where a vocabulary holds a marker (or part of one) as a control token, the grammar
    writes it as that token (here one of the demo vocabulary's, which renders as no text):
    free text runs up to it, the grammar compiles under ``required`` and ``auto``, and a
    forced call opens with the opener's text."""
    from engine.runtime.decode.grammar import compile_grammar

    fmt, control = family.fmt, family.control
    (token,) = vocab[0].tokenize("<|im_start|>", parse_special=True)
    assert vocab[0].detokenize([token]) == ""

    def lit(s: str) -> str:
        """``s`` as a grammar literal, each ``control`` in it the control token."""
        pieces = []
        for i, text in enumerate(s.split(control)):
            if i:
                pieces.append(f"<[{token}]>")
            if text:
                pieces.append(vocab[2](text))
        return " ".join(pieces)

    assert control in fmt.write([("pick", {"mode": "fast", "n": 1})])  # a marker the format writes
    spec = reply_grammar(lit=lit, fmt=fmt, tools=PICK, choice=ToolChoice("required"))
    assert f"<[{token}]>" in spec.source
    compile_grammar(reply_grammar(lit=lit, fmt=fmt, tools=PICK, choice=ToolChoice("auto")))
    for seed in range(2):
        assert drive(vocab, spec, "", 120, seed).startswith(fmt.trigger.replace(control, ""))
