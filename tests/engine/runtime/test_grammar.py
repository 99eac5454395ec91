"""Grammar-constrained decoding on the trained demo (a real MTP head): output that
follows the schema, the same output with and without speculation, forced tokens that
cost no forward and no head call, and bad constraints refused with words."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.errors import InvalidRequestError
from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.grammar import MAX_GRAMMAR_CHARS, Constraint, GrammarSpec, compile_grammar
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.drafting.propose import MtpDraft
from engine.runtime.decode.sampling import SamplingParams
from engine.runtime.llama.vocab import grammar_tokenizer
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.runtime.measure.batchnoise import check_within_noise, reference, replay
from engine.synth.demo import demo_model_path

PROMPT = "<|im_start|>user\nDescribe a person as JSON.<|im_end|>\n<|im_start|>assistant\n"

SCHEMAS = {
    "enum and range": {
        "type": "object",
        "properties": {
            "colour": {"enum": ["red", "green", "blue"]},
            "size": {"type": "integer", "minimum": 1, "maximum": 9},
        },
        "required": ["colour", "size"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 8},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "bounded array": {
        "type": "object",
        "properties": {
            "scores": {
                "type": "array",
                "items": {"type": "number", "minimum": 0, "maximum": 1},
                "minItems": 2,
                "maxItems": 4,
            }
        },
        "required": ["scores"],
        "additionalProperties": False,
    },
    "booleans and null": {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "note": {"type": "null"},
            "id": {"type": "string", "pattern": "^[a-f]{4}$"},
        },
        "required": ["ok", "note", "id"],
        "additionalProperties": False,
    },
    "key heavy": {
        "type": "object",
        "properties": {
            f"the_field_named_{w}": {"type": "boolean"} for w in ("alpha", "bravo", "charlie", "delta", "echo")
        },
        "required": [f"the_field_named_{w}" for w in ("alpha", "bravo", "charlie", "delta", "echo")],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def demo():
    lm = load(LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED, n_ctx=1024, max_draft_depth=4))
    yield lm
    lm.close()


def _constraint(lm, spec: GrammarSpec) -> Constraint:
    return Constraint(grammar_tokenizer(lm.model), compile_grammar(spec), lm.model.n_vocab)


def _run(lm, spec, depth=None, n=160, **kw):
    params = DecodeParams(max_tokens=n, depth=depth, constraint=_constraint(lm, spec), **kw)
    return generate(lm.session, lm.model.prompt_tokens(PROMPT), params)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_output_follows_the_schema_with_and_without_mtp(demo, name):
    schema = SCHEMAS[name]
    spec = GrammarSpec.json_schema(schema)
    plain = _run(demo, spec)
    assert plain.stop_reason == "eog", plain.text  # complete: the grammar allowed the end
    jsonschema.validate(json.loads(plain.text), schema)
    prompt = demo.model.prompt_tokens(PROMPT)
    for depth in (FixedDepth(1), FixedDepth(3), AdaptiveDepth(4)):
        g = _run(demo, spec, depth)
        jsonschema.validate(json.loads(g.text), schema)
        # the same tokens as constrained plain decoding, up to llama.cpp's batch noise
        if g.tokens != plain.tokens:
            noise = replay(demo, prompt, *reference(demo, prompt, 32), width=4).max_abs_diff
            assert check_within_noise(demo, prompt, g.tokens, 2 * noise) == [], (name, depth)


def test_forced_tokens_ride_free_with_mtp_off_and_skip_the_head_with_it(demo, monkeypatch):
    spec = GrammarSpec.json_schema(SCHEMAS["key heavy"])
    rounds = []
    plain = generate(
        demo.session,
        demo.model.prompt_tokens(PROMPT),
        DecodeParams(max_tokens=160, constraint=_constraint(demo, spec)),
        on_round=rounds.append,
    )
    assert plain.stats.forced > plain.stats.generated / 2
    assert plain.stats.target_forwards < 0.5 * plain.stats.generated  # forwards per token below 1
    assert 0 <= plain.stats.forced - sum(r.forced for r in rounds) <= 1  # the rounds' plus the prompt's first token
    calls = []
    real_draft = MtpDraft.draft
    monkeypatch.setattr(MtpDraft, "draft", lambda self, *a: calls.append(a) or real_draft(self, *a))
    spec_rounds = []
    g = generate(
        demo.session,
        demo.model.prompt_tokens(PROMPT),
        DecodeParams(max_tokens=160, depth=FixedDepth(3), constraint=_constraint(demo, spec)),
        on_round=spec_rounds.append,
    )
    forced_rounds = [r for r in spec_rounds if r.forced]
    assert forced_rounds and all(r.drafted == 0 for r in forced_rounds)
    assert len(calls) == len(spec_rounds) - len(forced_rounds)  # the head was asked in the other rounds only
    assert g.tokens == plain.tokens and g.stats.target_forwards <= plain.stats.target_forwards


def test_drafts_are_cut_to_what_the_grammar_allows(demo):
    spec = GrammarSpec("regex", "[0-9]{40}")
    rounds = []
    g = generate(
        demo.session,
        demo.model.prompt_tokens(PROMPT),
        DecodeParams(max_tokens=40, depth=FixedDepth(3), constraint=_constraint(demo, spec)),
        on_round=rounds.append,
    )
    assert g.text.isdigit() and len(g.text) == 40
    c = _constraint(demo, spec)
    for r in rounds:  # every verified draft was a digit string the grammar accepts
        assert all(demo.model.piece(t).isdigit() for t in r.drafts), r.drafts
    assert c.valid_prefix(demo.model.tokenize("12ab")) < len(demo.model.tokenize("12ab"))


def test_a_cut_off_structure_ends_with_length(demo):
    g = _run(demo, GrammarSpec.json_schema(SCHEMAS["nested"]), FixedDepth(2), n=6)
    assert g.stop_reason == "max_tokens" and g.stats.stop_reason.finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(g.text)


def test_sampling_under_a_grammar_stays_inside_it(demo):
    spec = GrammarSpec.json_schema(SCHEMAS["enum and range"])
    for seed in range(6):
        for depth, sampled_draft in ((None, False), (FixedDepth(2), False), (FixedDepth(2), True)):
            g = _run(demo, spec, depth, sampling=SamplingParams(1.0, 1.0, 0, seed), sampled_draft=sampled_draft)
            jsonschema.validate(json.loads(g.text), SCHEMAS["enum and range"])


@pytest.mark.parametrize(
    "spec,words",
    [
        (GrammarSpec("json_schema", '{"type": "object", "properties": {"a": {"type": "nonsense"}}}'), "json schema"),
        (GrammarSpec("gbnf", 'root ::= "a" missing'), "gbnf"),
        (GrammarSpec("regex", "(unclosed"), "regex"),
        (GrammarSpec("lark", "start: ???"), "lark"),
        (GrammarSpec("json_schema", json.dumps({"enum": ["x" * 50] * (MAX_GRAMMAR_CHARS // 50)})), "characters"),
        (
            GrammarSpec.json_schema({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}),
            "Unimplemented keys",
        ),  # an unsupported feature is named, never silently ignored
        (GrammarSpec.json_schema({"$ref": "https://example.com/remote.json"}), "example.com"),  # no fetching
    ],
)
def test_a_constraint_that_cannot_be_used_is_refused_with_words(spec, words):
    with pytest.raises(InvalidRequestError) as err:
        compile_grammar(spec)
    assert words in str(err.value) and err.value.param == spec.param


@pytest.mark.parametrize("depth", ["3", "auto"])
def test_exact_mode_constrained_mtp_output_is_bit_identical(tmp_path, monkeypatch, depth):
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))  # auto learns in a home of its own
    from tests.engine.cli_helpers import mtp_json

    (tmp_path / "s.json").write_text(json.dumps(SCHEMAS["nested"]))
    common = [
        "generate",
        "--model",
        str(demo_model_path()),
        "--prompt",
        PROMPT,
        "--max-tokens",
        "96",
        "--exact",
        "--json-schema",
        str(tmp_path / "s.json"),
    ]
    plain = mtp_json(*common, "--mtp", "off")
    spec = mtp_json(*common, "--draft-depth", depth)
    assert spec["tokens"] == plain["tokens"] and spec["stats"]["drafted"] > 0
    jsonschema.validate(json.loads(spec["text"]), SCHEMAS["nested"])


def test_a_cancel_mid_structure_leaves_the_next_request_exact(demo):
    """Cancelled at a verify: the contexts hold what was emitted, and the next constrained
    request (a fresh matcher) gives what it gives on a fresh session."""
    spec = GrammarSpec.json_schema(SCHEMAS["nested"])
    fresh = _run(demo, spec, FixedDepth(2))
    seen = []

    def hook(phase):
        seen.append(phase)
        if phase == "verify" and seen.count("verify") == 3:
            cancel.set()

    import threading

    cancel = threading.Event()
    demo.session.phase_hook = hook
    try:
        params = DecodeParams(max_tokens=160, depth=FixedDepth(2), constraint=_constraint(demo, spec))
        cut = generate(demo.session, demo.model.prompt_tokens(PROMPT), params, cancel=cancel)
    finally:
        demo.session.phase_hook = None
    assert cut.stop_reason == "cancelled" and 0 < len(cut.tokens) < len(fresh.tokens)
    assert cut.tokens == fresh.tokens[: len(cut.tokens)]
    again = _run(demo, spec, FixedDepth(2))
    assert again.tokens == fresh.tokens
