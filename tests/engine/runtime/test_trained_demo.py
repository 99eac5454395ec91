"""The trained demo as the real MTP model of the test suite: a real head with realistic
acceptance, where constructed fixtures have huge logit margins.

* Greedy identity, with the bit-exactness issue's semantics: in the default build every
  MTP token is the one-at-a-time argmax up to the measured logit noise; in exact mode
  (child processes) MTP output is bit-identical to plain output, at fixed depths and auto.
* Adaptive depth: auto learns this model's acceptance by position, which falls with depth.
* Sampled speculation: the same seed gives the same text with argmax drafts, and sampled
  drafts are accepted at a realistic rate.
"""

from __future__ import annotations

import pytest

from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.measure.batchnoise import check_within_noise, reference, replay
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.runtime.decode.sampling import SamplingParams
from engine.synth.demo import demo_model_path
from tests.engine.cli_helpers import mtp_json

CODE = 'import os\n\n\ndef list_files(path):\n    """Return the names of the files in path."""\n'
PROMPTS = (
    CODE,
    'class Stack:\n    """A last-in, first-out stack."""\n\n    def __init__(self):\n',
    "def parse_args(argv):\n    parser = argparse.ArgumentParser(",
)


@pytest.fixture(scope="module")
def demo():
    lm = load(LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED, n_ctx=1024, max_draft_depth=6))
    yield lm
    lm.close()


def _run(lm, prompt, depth, n=96, **kw):
    return generate(
        lm.session, lm.model.prompt_tokens(prompt), DecodeParams(max_tokens=n, depth=depth, ignore_eog=True, **kw)
    )


def test_mtp_tokens_are_argmaxes_up_to_the_measured_noise(demo):
    prompt = demo.model.prompt_tokens(CODE)
    noise = replay(demo, prompt, *reference(demo, prompt, 32), width=4).max_abs_diff
    plain = _run(demo, CODE, None)
    for k in (1, 2, 3, 5):
        g = _run(demo, CODE, FixedDepth(k))
        assert 0 < g.stats.accepted < g.stats.drafted, k  # a real head: right and wrong drafts
        assert g.tokens == plain.tokens or check_within_noise(demo, prompt, g.tokens, 2 * noise) == [], k
    wrong = list(plain.tokens)
    wrong[10] = (wrong[10] + 1) % demo.model.n_vocab
    assert check_within_noise(demo, prompt, wrong, 2 * noise)  # the check would catch a wrong token


@pytest.mark.parametrize("depth", ["3", "auto"])
def test_exact_mode_mtp_output_is_bit_identical(depth):
    common = ["generate", "--model", str(demo_model_path()), "--prompt", CODE, "--max-tokens", "96", "--exact"]
    plain = mtp_json(*common, "--mtp", "off")
    spec = mtp_json(*common, "--draft-depth", depth)
    assert spec["tokens"] == plain["tokens"] and spec["stats"]["drafted"] > 0


def test_acceptance_falls_with_draft_position(demo):
    drafted, accepted = [0, 0, 0], [0, 0, 0]
    for p in PROMPTS:
        s = _run(demo, p, FixedDepth(3), n=64).stats
        for i in range(3):
            drafted[i] += s.drafted_at[i]
            accepted[i] += s.accepted_at[i]
    p = [a / d for a, d in zip(accepted, drafted)]
    assert 0.3 < p[0] < 0.98 and p[0] > p[2], p


def test_auto_output_is_the_plain_output_up_to_the_noise(demo):
    prompt = demo.model.prompt_tokens(PROMPTS[1])
    noise = replay(demo, prompt, *reference(demo, prompt, 32), width=4).max_abs_diff
    policy = AdaptiveDepth(6)
    plain = _run(demo, PROMPTS[1], None)
    for _ in range(3):  # the policy learns across requests; the output never changes
        g = _run(demo, PROMPTS[1], policy)
        assert g.tokens == plain.tokens or check_within_noise(demo, prompt, g.tokens, 2 * noise) == []
    assert sum(policy.depth_counts.values()) > 0


def test_same_seed_same_text_with_argmax_drafts(demo):
    for seed in range(4):
        sp = SamplingParams(0.8, 1.0, 0, seed)
        plain = _run(demo, CODE, None, n=48, sampling=sp)
        for k in (1, 3):
            spec = _run(demo, CODE, FixedDepth(k), n=48, sampling=sp)
            assert spec.tokens == plain.tokens and spec.stats.drafted > 0, (seed, k)


def test_sampled_drafts_are_accepted_at_a_realistic_rate(demo):
    got = [
        _run(demo, CODE, FixedDepth(2), n=64, sampling=SamplingParams(0.8, 1.0, 0, s), sampled_draft=True)
        for s in range(4)
    ]
    drafted = sum(g.stats.drafted for g in got)
    accepted = sum(g.stats.accepted for g in got)
    assert 0.2 < accepted / drafted < 0.98
