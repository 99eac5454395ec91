"""Speculation never changes the output: MTP greedy == plain greedy, token for token."""

from __future__ import annotations

import math

import pytest

from tests.conftest import QUANTS
from tests.engine.runtime.helpers import PROMPTS, load_fixture, run

DEPTHS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def loaded(fixtures):
    cache = {}

    def get(name: str, source: str):
        key = (name, source)
        if key not in cache:
            cache[key] = load_fixture(fixtures[name], source)
        return cache[key]

    yield get
    for lm in cache.values():
        lm.close()


@pytest.mark.parametrize("name", ["random", "partial", "full"])
@pytest.mark.parametrize("source", ["integrated", "external"])
def test_speculative_equals_plain_greedy(loaded, name, source):
    plain = loaded(name, "off")
    spec = loaded(name, source)
    for prompt in PROMPTS:
        want = run(plain, prompt, None).tokens
        assert len(want) > 0
        for k in DEPTHS:
            g = run(spec, prompt, k)
            assert g.tokens == want, f"{name}/{source} depth {k} diverged on {prompt!r}"
            assert g.stats.mtp == "on" and g.stats.drafted > 0


@pytest.mark.parametrize("name", ["random", "partial"])
def test_trunk_only_file_decodes_like_the_integrated_model(loaded, name):
    a, b = loaded(name, "off"), loaded(name, "trunk")
    for prompt in PROMPTS:
        assert run(a, prompt, None).tokens == run(b, prompt, None).tokens


def test_acceptance_levels_match_the_constructed_models(loaded):
    def acceptance(name):
        gens = [run(loaded(name, "integrated"), p, 2) for p in PROMPTS]
        return sum(g.stats.accepted for g in gens) / sum(g.stats.drafted for g in gens)

    assert acceptance("full") == 1.0
    assert acceptance("random") < 0.1
    assert 0.3 < acceptance("partial") < 0.9


def test_every_rollback_length_is_exercised(loaded):
    """With partial acceptance every accepted length 0..K occurs, so every rollback
    length (K - a) is exercised, and the output still matches plain greedy."""
    spec, plain = loaded("partial", "integrated"), loaded("partial", "off")
    for k in DEPTHS:
        hist = accepted_length_histogram(spec, plain, k)
        assert all(n > 0 for n in hist), f"depth {k}: accepted-length histogram {hist}"


def accepted_length_histogram(spec, plain, k: int) -> list[int]:
    """Rounds by accepted length over every prompt, checking each output against plain."""
    hist = [0] * (k + 1)
    for prompt in PROMPTS:
        g = run(spec, prompt, k, max_tokens=96)
        assert g.tokens == run(plain, prompt, None, max_tokens=96).tokens
        for i, n in enumerate(g.stats.accept_len_hist):
            hist[i] += n
    return hist


def test_external_head_drafts_identical_to_integrated(loaded):
    for name in ("partial", "random"):
        integ, ext = loaded(name, "integrated"), loaded(name, "external")
        for prompt in PROMPTS[:3]:
            for k in (1, 3):
                rounds_i, rounds_e = [], []
                gi = _run_rounds(integ, prompt, k, rounds_i)
                ge = _run_rounds(ext, prompt, k, rounds_e)
                assert gi.tokens == ge.tokens
                assert [r.drafts for r in rounds_i] == [r.drafts for r in rounds_e]
                assert [r.accepted for r in rounds_i] == [r.accepted for r in rounds_e]


def _run_rounds(lm, prompt, k, sink):
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth

    return generate(
        lm.session, lm.model.tokenize(prompt), DecodeParams(max_tokens=48, depth=FixedDepth(k)), on_round=sink.append
    )


@pytest.mark.parametrize("k", DEPTHS)
def test_full_acceptance_needs_ceil_n_over_k_plus_1_target_forwards(loaded, k):
    """The first token comes from the prompt's logits; each round then verifies K drafts
    and emits K + 1 tokens in one target forward."""
    lm = loaded("full", "integrated")
    for n in (1, 2, 17, 64):
        g = run(lm, PROMPTS[0], k, max_tokens=n)
        assert len(g.tokens) == n
        assert g.stats.accepted == g.stats.drafted  # the last round drafts only what max_tokens allows
        assert g.stats.target_forwards == math.ceil((n - 1) / (k + 1))


# ------------------------------------------------------------- quantized arithmetic
@pytest.fixture(scope="module")
def loaded_quant(quantized):
    cache = {}

    def get(name: str, quant: str, source: str):
        key = (name, quant, source)
        if key not in cache:
            cache[key] = load_fixture(quantized(name, quant), source)
        return cache[key]

    yield get
    for lm in cache.values():
        lm.close()


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("name", ["random", "partial", "full"])
def test_speculative_equals_plain_greedy_on_quantized_models(loaded_quant, name, quant):
    """The same identity on llama.cpp's quantized kernels (target and head quantized
    by its own quantizer; rows that do not fit a K-quant block fall back as in
    llama-quantize), for both MTP sources."""
    for source, baseline in (("integrated", "off"), ("external", "trunk")):
        # external MTP runs on the trunk-only file, quantized on its own: Q4_K_M picks
        # tensor types by layer position and count, so its trunk need not equal the
        # integrated file's; each is compared with plain decoding of the same file
        plain, spec = loaded_quant(name, quant, baseline), loaded_quant(name, quant, source)
        for prompt in PROMPTS[:3]:
            want = run(plain, prompt, None).tokens
            for k in (1, 3):
                g = run(spec, prompt, k)
                assert g.tokens == want, f"{name} {quant} {source} depth {k} diverged on {prompt!r}"
                assert g.stats.drafted > 0


@pytest.mark.parametrize("quant", QUANTS)
def test_every_rollback_length_on_quantized_models(loaded_quant, quant):
    spec, plain = loaded_quant("partial", quant, "integrated"), loaded_quant("partial", quant, "off")
    hist = accepted_length_histogram(spec, plain, 3)
    assert all(n > 0 for n in hist), f"{quant}: accepted-length histogram {hist}"


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0"])  # uniform types: both files hold the same bytes
def test_quantized_external_head_drafts_like_quantized_integrated(loaded_quant, quant):
    integ, ext = loaded_quant("partial", quant, "integrated"), loaded_quant("partial", quant, "external")
    for prompt in PROMPTS[:2]:
        ri, re_ = [], []
        assert _run_rounds(integ, prompt, 2, ri).tokens == _run_rounds(ext, prompt, 2, re_).tokens
        assert [r.drafts for r in ri] == [r.drafts for r in re_]
