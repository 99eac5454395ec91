"""Chat templates, and multi-turn conversations that reuse the KV cache."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.prompt.chat import CHATML, render
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.engine import Engine
from engine.runtime.load.loader import LoadSpec, MtpSource


def test_chatml_default_and_generation_prompt():
    text = render(None, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert not render(CHATML, [{"role": "user", "content": "x"}], add_generation_prompt=False).endswith("assistant\n")


def test_template_features_used_by_real_models():
    tpl = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
        "[{{ m['role'] | upper }}] {{ m['content'] | tojson }}\n{% endfor %}{{ strftime_now('%Y') | length }}"
    )
    out = render(tpl, [{"role": "user", "content": "héllo"}], bos_token="<s>")
    assert out == '<s>[USER] "héllo"\n4'
    with pytest.raises(InvalidRequestError, match="no tools"):
        render(tpl, [{"role": "tool", "content": "x"}])


@pytest.mark.parametrize(
    "messages,match",
    [
        ([], "non-empty"),
        ([{"role": "robot", "content": "x"}], "role"),
        ([{"role": "user", "content": 3}], "string"),
        (["hi"], "object"),
    ],
)
def test_bad_messages(messages, match):
    with pytest.raises(InvalidRequestError, match=match):
        render(None, messages)


def test_content_parts_are_joined():
    out = render(None, [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert "ab<|im_end|>" in out


def test_prompt_cache_tokenizes_only_the_new_text():
    calls = []

    def tok(s):
        calls.append(s)
        return [ord(c) for c in s]

    c = TokenizedTexts()
    c.remember("AB", [1, 2], "C", [3])
    assert c.tokenize("ABCD", tok) == [1, 2, 3, ord("D")] and calls == ["D"]
    assert c.tokenize("XY", tok) == [ord("X"), ord("Y")]


@pytest.fixture(scope="module")
def engine(fixtures):
    eng = Engine().start()
    eng.submit(J.LoadModel(LoadSpec(fixtures["partial"].path, mtp=MtpSource.INTEGRATED))).result(60)
    yield eng
    eng.stop()


def test_second_turn_reuses_the_first_turn_in_the_kv_cache(engine, fixtures):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]
    r1 = engine.submit(J.Generate(messages=msgs, max_tokens=24, draft_depth=2)).result(60)
    msgs2 = msgs + [{"role": "assistant", "content": r1.text}, {"role": "user", "content": "And then?"}]
    r2 = engine.submit(J.Generate(messages=msgs2, max_tokens=24, draft_depth=2)).result(60)
    # everything up to the end of the first reply is reused; only the new turn is decoded
    assert r2.stats.prompt_tokens_reused >= r1.prompt_tokens + len(r1.tokens) - 1
    # and the same conversation without speculation, in another engine, says the same
    with Engine() as other:
        other.submit(J.LoadModel(LoadSpec(fixtures["partial"].path, mtp=MtpSource.OFF))).result(60)
        assert other.submit(J.Generate(messages=msgs, max_tokens=24)).result(60).tokens == r1.tokens
        assert other.submit(J.Generate(messages=msgs2, max_tokens=24)).result(60).tokens == r2.tokens


def test_a_prompt_that_diverges_early_starts_over_in_one_pass(engine, fixtures):
    # The trunk's recurrent state rolls back only a few tokens, so a prompt sharing just
    # its first tokens with the last one cannot reuse them: the engine decodes it afresh
    # (one pass, not a rebuilt prefix plus the rest) and still says what a fresh engine says.
    engine.submit(J.Generate(prompt="The moon is bright tonight", max_tokens=16, draft_depth=2)).result(60)
    second = engine.submit(J.Generate(prompt="The moon is dark", max_tokens=16, draft_depth=2)).result(60)
    assert second.stats.prompt_tokens_reused == 0 and second.stats.rollback_repairs == 0
    with Engine() as other:
        other.submit(J.LoadModel(LoadSpec(fixtures["partial"].path, mtp=MtpSource.OFF))).result(60)
        assert other.submit(J.Generate(prompt="The moon is dark", max_tokens=16)).result(60).tokens == second.tokens
