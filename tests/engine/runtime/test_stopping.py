"""Stops: max tokens, end-of-generation tokens, stop strings (also inside an accepted
speculative span), context full — identical with and without speculation."""

from __future__ import annotations

import pytest

from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams

from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.stopping import StopChecker
from tests.engine.runtime.helpers import load_fixture, run


@pytest.fixture(scope="module")
def full(fixtures):
    spec = load_fixture(fixtures["full"], "integrated")
    plain = load_fixture(fixtures["full"], "off")
    yield spec, plain
    spec.close()
    plain.close()


def test_stop_string_inside_an_accepted_span_emits_nothing_past_it(full):
    spec, plain = full
    prompt = "Hello! How are you today?"
    ref = run(plain, prompt, None, max_tokens=40)
    # a stop string made of the text of tokens 10..11 of the reference output
    pieces = [plain.model.piece(t) for t in ref.tokens]
    # token i+1 completes the stop; i % 5 == 1 puts it mid-round at depth 4 (rounds emit 5)
    i = next(
        i for i in range(8, 36) if i % 5 == 1 and pieces[i].isascii() and pieces[i].strip() and pieces[i + 1].isascii()
    )
    stop = (pieces[i] + pieces[i + 1]).decode()
    before = b"".join(pieces[:i]).decode("utf-8", "replace")
    assert stop not in before
    for k in (None, 1, 3, 4):
        rounds = []
        g = generate(
            (spec if k else plain).session,
            spec.model.tokenize(prompt),
            DecodeParams(max_tokens=40, stop=(stop,), depth=FixedDepth(k) if k else None),
            on_round=rounds.append,
        )
        assert g.stop_reason == "stop_string"
        assert g.text == before  # nothing at or past the stop string
        assert g.tokens == ref.tokens[: i + 2]  # the token completing the stop string is the last one
        if k == 4:
            # the stop happened inside a round that accepted more drafts than it emitted
            assert rounds[-1].accepted + 1 > rounds[-1].emitted
        if k:
            held = spec.session.target_tokens
            history = spec.model.tokenize(prompt) + g.tokens
            assert held == history[: len(held)] and len(held) >= len(history) - 1


def test_end_of_generation_token_stops_and_is_not_emitted(fixtures):
    eos_fx = fixtures["eos"]
    spec = load_fixture(eos_fx, "integrated")
    plain = load_fixture(eos_fx, "off")
    try:
        eog = spec.model.eos
        prompt = "Hi"
        ref = run(plain, prompt, None, max_tokens=2000)
        assert ref.stop_reason == "eog"
        assert eog not in ref.tokens and len(ref.tokens) > 0
        for k in (1, 2, 4):
            g = run(spec, prompt, k, max_tokens=2000)
            assert g.tokens == ref.tokens and g.stop_reason == "eog"
    finally:
        spec.close()
        plain.close()


@pytest.mark.parametrize("k", [None, 1, 4])
def test_context_full_stops_at_the_same_token(fixtures, k):
    lm = load_fixture(fixtures["full"], "integrated", n_ctx=300)
    try:
        g = run(lm, "Hello", k, max_tokens=1000)
        assert g.stop_reason == "context_full"
        assert len(lm.model.tokenize("Hello")) + len(g.tokens) == lm.session.n_ctx
    finally:
        lm.close()


def test_stop_checker_holds_back_partial_stop_strings_and_utf8():
    pieces = {
        1: "Hel".encode(),
        2: "lo".encode(),
        3: " wor".encode(),
        4: "ld".encode(),
        5: "é".encode()[:1],
        6: "é".encode()[1:],
    }
    c = StopChecker(pieces.__getitem__, lambda t: False, max_tokens=10, stop=("o wo",))
    out = [c.push(t).text for t in (1, 2)]
    assert "".join(out) == "Hell"  # the final "o" could start "o wo": held back
    r = c.push(3)
    assert r.stop == "stop_string" and c.text == "Hell"
    c2 = StopChecker(pieces.__getitem__, lambda t: False, max_tokens=10)
    assert c2.push(5).text == "" and c2.push(6).text == "é"  # a character split across tokens


# ------------------------------------------------------------------- sampler
def _reference(logits, temperature, top_k, top_p):
    """The textbook definition: full sort, truncate, renormalise."""
    import numpy as np

    x = logits.astype(np.float64) / temperature
    idx = np.argsort(-x, kind="stable")
    if top_k > 0:
        idx = idx[:top_k]
    probs = np.exp(x[idx] - x[idx][0])
    probs /= probs.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), top_p)) + 1
        idx, probs = idx[:keep], probs[:keep] / probs[:keep].sum()
    return dict(zip(idx.tolist(), probs.tolist()))


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (40, 1.0), (0, 0.9), (0, 0.999), (50, 0.8), (1, 1.0)])
def test_sampler_distribution_equals_the_full_sort_definition(top_k, top_p):
    import numpy as np

    from engine.runtime.decode.sampling import Sampler, SamplingParams

    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(262_144) * 3).astype(np.float32)  # a Gemma-sized vocabulary
    got_idx, got_p = Sampler(SamplingParams(0.7, top_p, top_k, seed=1)).distribution(logits)
    want = _reference(logits, 0.7, top_k, top_p)
    assert set(got_idx.tolist()) == set(want)
    got = dict(zip(got_idx.tolist(), got_p.tolist()))
    assert max(abs(got[t] - want[t]) for t in want) < 1e-12


def test_sampler_draws_follow_its_distribution_and_the_seed():
    import numpy as np

    from engine.runtime.decode.sampling import Sampler, SamplingParams

    logits = np.log(np.array([0.5, 0.3, 0.2, 1e-9], dtype=np.float64)).astype(np.float32)
    s = Sampler(SamplingParams(1.0, seed=7))
    draws = [s.sample(logits, pos) for pos in range(20000)]  # one counter-based draw per position
    freq = np.bincount(draws, minlength=4) / len(draws)
    assert np.allclose(freq[:3], [0.5, 0.3, 0.2], atol=0.015) and freq[3] == 0
    again = Sampler(SamplingParams(1.0, seed=7))
    assert [again.sample(logits, pos) for pos in range(200)] == draws[:200]
    other = Sampler(SamplingParams(1.0, seed=8))
    assert [other.sample(logits, pos) for pos in range(200)] != draws[:200]


def test_counter_based_draws_are_uniform_and_depend_on_seed_position_and_stream():
    import numpy as np

    from engine.runtime.decode.sampling import uniform

    u = np.array([uniform(42, p) for p in range(20000)])
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 1850
    assert uniform(42, 7) == uniform(42, 7) != uniform(42, 8)
    assert uniform(42, 7, 0) != uniform(42, 7, 1) and uniform(42, 7) != uniform(43, 7)
