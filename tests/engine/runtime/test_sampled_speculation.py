"""MTP while sampling: exact in distribution (both modes), and the same text as plain
sampling for the same seed (argmax drafts).

The distribution tests compare, over many seeds, the tokens sampled at the verified
positions with speculation against plain sampling: a two-sample chi-square test at a
fixed false-alarm rate (alpha = 0.001 per comparison; the seeds are fixed, so the result
is too). The same test catches a deliberately wrong acceptance rule.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from engine.runtime.decode import accept as A
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.grammar import Constraint, GrammarSpec, compile_grammar
from engine.runtime.decode.sampling import SamplingParams
from engine.runtime.llama.vocab import grammar_tokenizer
from tests.engine.runtime.helpers import PROMPTS, load_fixture

ALPHA_Z = 3.0902  # one-sided normal quantile for alpha = 0.001
SEEDS = 600
N_TOKENS = 5


@pytest.fixture(scope="module")
def lm(fixtures):
    m = load_fixture(fixtures["partial"], "integrated", max_depth=4)
    yield m
    m.close()


def _run(
    lm,
    seed: int,
    depth: int | None,
    *,
    sampled_draft: bool = False,
    temperature=1.0,
    top_k=8,
    top_p=1.0,
    grammar: GrammarSpec | None = None,
):
    constraint = None
    if grammar is not None:
        constraint = Constraint(grammar_tokenizer(lm.model), compile_grammar(grammar), lm.model.n_vocab)
    params = DecodeParams(
        max_tokens=N_TOKENS,
        sampling=SamplingParams(temperature, top_p, top_k, seed),
        depth=FixedDepth(depth) if depth else None,
        sampled_draft=sampled_draft,
        ignore_eog=True,
        constraint=constraint,
    )
    return generate(lm.session, lm.model.prompt_tokens(PROMPTS[0]), params)


def chi2_critical(df: int) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at 1 - alpha."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + ALPHA_Z * math.sqrt(h)) ** 3


def two_sample_chi2(a: Counter, b: Counter) -> tuple[float, int]:
    """Equal-size samples: sum (a_i - b_i)^2 / (a_i + b_i), rare categories pooled."""
    cats = set(a) | set(b)
    pooled_a = pooled_b = 0
    stat, df = 0.0, -1
    for c in cats:
        x, y = a.get(c, 0), b.get(c, 0)
        if x + y < 10:
            pooled_a, pooled_b = pooled_a + x, pooled_b + y
            continue
        stat += (x - y) ** 2 / (x + y)
        df += 1
    if pooled_a + pooled_b:
        stat += (pooled_a - pooled_b) ** 2 / (pooled_a + pooled_b)
        df += 1
    return stat, max(df, 1)


def _samples(lm, depth, seeds, **kw):
    """Per generated position, the Counter of (previous token, token) pairs."""
    pos = [Counter() for _ in range(N_TOKENS)]
    drafted = 0
    for s in seeds:
        g = _run(lm, s, depth, **kw)
        drafted += g.stats.drafted
        toks = g.tokens
        for i in range(1, min(len(toks), N_TOKENS)):
            pos[i][(toks[i - 1], toks[i])] += 1
    return pos, drafted


@pytest.fixture(scope="module")
def plain_samples(lm):
    return _samples(lm, None, range(SEEDS))[0]


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("sampled_draft", [False, True], ids=["argmax-draft", "sampled-draft"])
def test_speculative_sampling_has_the_plain_distribution(lm, plain_samples, depth, sampled_draft):
    # independent seeds for the speculative runs: two samples of one distribution
    spec, drafted = _samples(lm, depth, range(10**6, 10**6 + SEEDS), sampled_draft=sampled_draft)
    assert drafted >= SEEDS * depth  # speculation really ran, at this depth
    for i in range(1, N_TOKENS):
        stat, df = two_sample_chi2(plain_samples[i], spec[i])
        assert stat < chi2_critical(df), f"position {i}: chi2 {stat:.1f} with {df} df"


def test_a_wrong_acceptance_rule_is_caught(lm, plain_samples, monkeypatch):
    """Accept every sampled draft (ignore p/q): the output follows the MTP head instead of
    the target, and the same test rejects it."""
    monkeypatch.setattr(
        A,
        "_rejection",
        lambda rows, drafts, sampler, pos0, q: (
            len(drafts),
            sampler.sample(rows.logits(len(drafts)), pos0 + 1 + len(drafts)),
        ),
    )
    spec, _ = _samples(lm, 3, range(10**6, 10**6 + SEEDS), sampled_draft=True)
    worst = max(
        two_sample_chi2(plain_samples[i], spec[i])[0] / chi2_critical(two_sample_chi2(plain_samples[i], spec[i])[1])
        for i in range(1, N_TOKENS)
    )
    assert worst > 1.0


def test_an_argmax_acceptance_while_sampling_is_caught(lm, plain_samples, monkeypatch):
    """Greedy acceptance (keep a draft when it is the target's argmax) is wrong while
    sampling; the test sees the distribution move."""

    def greedy_accept(rows, drafts, sampler, pos0):
        a = 0
        while a < len(drafts) and drafts[a] == int(np.argmax(rows.logits(a))):
            a += 1
        return a, sampler.sample(rows.logits(a), pos0 + 1 + a)

    monkeypatch.setattr(A, "_sample_and_compare", greedy_accept)
    spec, _ = _samples(lm, 3, range(10**6, 10**6 + SEEDS))
    stats = [two_sample_chi2(plain_samples[i], spec[i]) for i in range(1, N_TOKENS)]
    assert any(stat > chi2_critical(df) for stat, df in stats)


@pytest.mark.parametrize("name", ["partial", "full"])
def test_same_seed_same_text_with_argmax_drafts(fixtures, name):
    """Pure temperature sampling: a logit difference of llama.cpp's batch noise moves a
    token's probability by far less than the draws resolve, so even without exact mode
    the same seed gives the same text here."""
    m = load_fixture(fixtures[name], "integrated", max_depth=4)
    try:
        for seed in range(8):
            plain = _run_n(m, seed, None, 32, temperature=0.8, top_k=0, top_p=1.0)
            for depth in (1, 3):
                spec = _run_n(m, seed, depth, 32, temperature=0.8, top_k=0, top_p=1.0)
                assert spec.tokens == plain.tokens, (name, seed, depth)
                assert spec.stats.drafted > 0 and spec.stats.seed == seed
    finally:
        m.close()


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (20, 0.9)])
def test_same_seed_same_text_in_exact_mode_with_truncation(quantized, top_k, top_p):
    """With top-k/top-p a near-boundary token can enter or leave the nucleus under batch
    noise; in exact mode there is none, so the text is identical for every seed and depth
    (child processes: exact mode is chosen per process)."""
    from tests.engine.cli_helpers import mtp_json

    fx = quantized("partial", "Q8_0")
    common = [
        "generate",
        "--model",
        str(fx.path),
        "--prompt",
        PROMPTS[1],
        "--max-tokens",
        "40",
        "--exact",
        "--temperature",
        "1.0",
        "--top-k",
        str(top_k),
        "--top-p",
        str(top_p),
    ]
    for seed in (1, 2, 3):
        plain = mtp_json(*common, "--seed", str(seed), "--mtp", "off")
        for depth in ("1", "4"):
            spec = mtp_json(*common, "--seed", str(seed), "--draft-depth", depth)
            assert spec["tokens"] == plain["tokens"] and spec["stats"]["drafted"] > 0, (seed, depth)


def _run_n(lm, seed, depth, n, **kw):
    params = DecodeParams(
        max_tokens=n,
        sampling=SamplingParams(kw["temperature"], kw["top_p"], kw["top_k"], seed),
        depth=FixedDepth(depth) if depth else None,
        ignore_eog=True,
    )
    return generate(lm.session, lm.model.prompt_tokens(PROMPTS[1]), params)


#: a constraint that forbids part of what the model likes (no letter e) and never ends
NO_E = GrammarSpec("regex", "[^eE]{1,64}")


@pytest.mark.parametrize("sampled_draft", [False, True], ids=["argmax-draft", "sampled-draft"])
def test_constrained_speculative_sampling_has_the_constrained_distribution(lm, sampled_draft):
    """Under a grammar, every verify row is sampled from the masked distribution (and
    rejection sampling uses the masked p), so speculation keeps constrained plain
    sampling's distribution."""
    plain, _ = _samples(lm, None, range(SEEDS), grammar=NO_E)
    spec, drafted = _samples(lm, 3, range(10**6, 10**6 + SEEDS), grammar=NO_E, sampled_draft=sampled_draft)
    assert drafted > SEEDS  # speculation ran under the grammar
    assert all(b"e" not in lm.model.piece(b).lower() for c in spec for (_, b) in c)
    for i in range(1, N_TOKENS):
        stat, df = two_sample_chi2(plain[i], spec[i])
        assert stat < chi2_critical(df), f"position {i}: chi2 {stat:.1f} with {df} df"
