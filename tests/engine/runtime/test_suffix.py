"""Drafts from the conversation itself (engine.runtime.decode.suffix): the index's matches,
identity with plain decoding when the answer copies the prompt (greedy, seeded sampling,
a grammar, penalties), fewer target forwards there, and the per-round choice between the
suffix draft and the MTP chain on given costs."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.penalties import Penalties
from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.sampling import SamplingParams
from engine.runtime.decode.suffix import MIN_MATCH, SuffixIndex, SuffixOrMtp
from engine.runtime.engine import Engine
from engine.runtime.load.loader import LoadSpec, MtpSource, load


def test_the_index_proposes_what_followed_the_longest_earlier_match():
    ix = SuffixIndex()
    ix.extend([1, 2, 3, 4, 5, 6, 7, 9, 9, 2, 3, 4])
    tokens, n = ix.propose(3)
    assert (tokens, n) == ([5, 6, 7], 3)  # "2 3 4" ended at 3 before: 5 6 7 followed
    ix.extend([5, 6, 7, 8])  # the longer match breaks on 8: no 8 after "7" before
    assert ix.propose(4) == ([], 0)
    ix.extend([1, 2])
    assert ix.propose(4) == ([], 0)  # "8 1 2" never occurred; a 2-token match is too short
    assert MIN_MATCH == 3
    ix2 = SuffixIndex()
    seq = [10, 11, 12, 13, 14, 15, 16, 17, 18, 50, 11, 12, 13, 14, 15, 16, 17, 18]
    ix2.extend(seq)
    tokens, n = ix2.propose(2)
    assert n == 8 and tokens == [50, 11]  # the longest length that matched, and never past the end


@pytest.fixture(scope="module")
def copying(fixtures):
    """The full-acceptance fixture (a bigram model) and a prompt whose answer repeats a
    stretch of it: the model continues its own earlier text."""
    lm = load(LoadSpec(fixtures["full"].path, mtp=MtpSource.INTEGRATED, n_ctx=1024, probe=False, fit="off"))
    start = lm.model.prompt_tokens("Once upon a time there was a small village")
    lm.session.reset()
    earlier = generate(lm.session, start, DecodeParams(max_tokens=120, ignore_eog=True)).tokens
    yield lm, start + earlier + start[1:]
    lm.close()


def _gen(lm, prompt, **kw):
    lm.session.reset()
    return generate(lm.session, prompt, DecodeParams(max_tokens=100, ignore_eog=True, **kw))


ARMS = {
    "greedy": {},
    "seeded sampling": {"sampling": SamplingParams(temperature=0.7, top_k=20, seed=11)},
    "penalties": {"penalties": Penalties(presence=0.3, frequency=0.2)},
}


@pytest.mark.parametrize("arm", list(ARMS))
@pytest.mark.parametrize("depth", ["fixed", "auto"])
def test_suffix_drafts_change_nothing_but_the_forwards(copying, arm, depth):
    lm, prompt = copying
    kw = ARMS[arm]
    plain = _gen(lm, prompt, **kw).tokens
    policy = (lambda: FixedDepth(2)) if depth == "fixed" else (lambda: AdaptiveDepth(lm.max_draft_depth))
    mtp = _gen(lm, prompt, depth=policy(), **kw)
    both = _gen(lm, prompt, depth=policy(), suffix_drafts=True, **kw)
    assert mtp.tokens == plain and both.tokens == plain
    if arm == "greedy":  # the answer copies the prompt: long drafts, all accepted
        assert both.stats.suffix_rounds > 0 and both.stats.suffix_accepted > 0
        assert both.stats.target_forwards < mtp.stats.target_forwards
        assert both.stats.suffix_drafted <= both.stats.drafted


def test_suffix_drafts_under_a_grammar(copying):
    lm, prompt = copying
    text = lm.model.detokenize(_gen(lm, prompt).tokens[:40])
    words = sorted({w for w in text.split() if w.isalnum()}) or ["a"]
    spec = GrammarSpec("regex", "(" + "|".join(map(__import__("re").escape, words)) + r"|[ \S])*")
    from engine.runtime.request import _constraint

    def run(**kw):
        c = _constraint(spec, lm.model, frozenset())
        return _gen(lm, prompt, constraint=c, **kw)

    plain = run().tokens
    assert run(depth=FixedDepth(2), suffix_drafts=True).tokens == plain


class _Costs:
    def __init__(self, verify):
        self.verify = verify

    def verify_ms(self, rows: int) -> float:
        return self.verify(rows)


class _Policy:
    """A depth policy's estimates as the suffix choice reads them (its only seam)."""

    max_depth = 4

    def __init__(self, rates, verify):
        self._rates = rates
        self.costs = _Costs(verify)

    def rates(self):
        return self._rates


def _consistent_policy(p_mtp: float, draft_ms: float = 0.3) -> _Policy:
    """Rates as a depth policy derives them: expected tokens of a chain of depth k over a
    verify of k + 1 rows plus k draft steps; a verify of w rows costs 1 + 0.1 w ms."""
    verify = lambda rows: 1.0 + 0.1 * rows  # noqa: E731
    rates = [sum(p_mtp**i for i in range(k + 1)) / (verify(k + 1) + draft_ms * k) for k in range(5)]
    return _Policy(rates, verify)


def test_the_choice_never_takes_the_source_expected_to_earn_less():
    src = SuffixOrMtp.__new__(SuffixOrMtp)
    src.acc, src.reach = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
    src.mtp_acc = src.mtp_reach = 0.0
    src.policy = _consistent_policy(0.8)
    for k in range(5):
        for bucket in range(3):
            for width in (1, 4, 15):
                p = src.acceptance(bucket)
                e = sum(p**i for i in range(width + 1))
                taken = src._suffix_pays(width, bucket, k)
                assert taken == (e / (1.0 + 0.1 * (width + 1)) > src.policy.rates()[k])
    # a bucket whose drafts were all rejected loses to a chain that pays, at any width
    src.acc[0], src.reach[0] = 0.0, 50.0
    assert not any(src._suffix_pays(w, 0, 2) for w in (1, 4, 15))
    # ... and one always accepted wins over it
    src.acc[1], src.reach[1] = 50.0, 50.0
    assert src._suffix_pays(15, 1, 2)
    # a fixed depth (no cost model): the one expected to give more tokens per round
    src.policy = FixedDepth(2)
    assert src._suffix_pays(15, 1, 2) and not src._suffix_pays(15, 0, 2)


def test_the_endpoint_field_reaches_the_decoder(fixtures):
    with Engine() as e:
        e.submit(J.LoadModel(LoadSpec(fixtures["full"].path, n_ctx=1024, probe=False, fit="off"))).result()
        start = "Once upon a time there was a small village"
        earlier = e.submit(J.Generate(prompt=start, max_tokens=120, ignore_eog=True, mtp=J.Mtp.OFF)).result().text
        prompt = start + earlier + start
        off = e.submit(J.Generate(prompt=prompt, max_tokens=64, ignore_eog=True, draft_depth=2)).result()
        on = e.submit(J.Generate(prompt=prompt, max_tokens=64, ignore_eog=True, draft_depth=2, suffix_drafts=True)).result()
    assert on.tokens == off.tokens
    assert on.stats.suffix_rounds > 0 and off.stats.suffix_rounds == 0


def test_suffix_drafts_are_bit_exact_in_exact_mode(fixtures, tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run([sys.executable, "-m", "tests.engine.runtime.exact_suffix_child", str(fixtures["full"].path),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["identity"].startswith("bit-exact") and r["same"]
    assert r["suffix_accepted"] > 0
