"""Adaptive draft depth: never changes the output, turns drafting off when it loses,
goes deep when it pays, and notices when drafts become good again."""

from __future__ import annotations

import json
import random

import pytest

from engine.runtime.decode.policy.adaptive import PROBE_MAX, PROBE_MIN, AdaptiveDepth
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.runtime.decode.stats import RoundStats
from engine.synth.qwen35 import Qwen35Spec, build_model
from tests.engine.runtime.helpers import PROMPTS, load_fixture, run


# ------------------------------------------------------------ with real models
@pytest.mark.parametrize("name", ["random", "partial", "full", "eos"])
def test_auto_is_token_identical(fixtures, name):
    spec = load_fixture(fixtures[name], "integrated", max_depth=6)
    plain = load_fixture(fixtures[name], "off")
    try:
        policy = AdaptiveDepth(6)
        for prompt in PROMPTS:
            want = run(plain, prompt, None, max_tokens=80).tokens
            got = generate(spec.session, spec.model.tokenize(prompt), DecodeParams(max_tokens=80, depth=policy))
            assert got.tokens == want
    finally:
        spec.close()
        plain.close()


def _chosen_after_warmup(lm, policy, prompts, tokens=160):
    for p in prompts[:2]:  # warm-up: the policy learns costs and acceptance
        generate(lm.session, lm.model.tokenize(p), DecodeParams(max_tokens=tokens, depth=policy, ignore_eog=True))
    before = policy.depth_counts.copy()
    for p in prompts[2:]:
        generate(lm.session, lm.model.tokenize(p), DecodeParams(max_tokens=tokens, depth=policy, ignore_eog=True))
    return policy.depth_counts - before


def test_policy_turns_drafting_off_at_zero_acceptance(fixtures):
    lm = load_fixture(fixtures["random"], "integrated", max_depth=6)
    try:
        chosen = _chosen_after_warmup(lm, AdaptiveDepth(6), PROMPTS)
        total = sum(chosen.values())
        assert chosen[0] / total > 0.95, chosen
    finally:
        lm.close()


@pytest.fixture(scope="module")
def deep_full(tmp_path_factory):
    """100% acceptance on a deeper model whose MTP block is a small share of a forward
    (16 trunk blocks), as in real models, so deep drafting pays even on a CPU."""
    spec = Qwen35Spec(name="deep full", weights="constructed", seed=21, n_embd=256, n_ff=768, n_trunk=16, dtype="f16")
    path = tmp_path_factory.mktemp("deep") / "deep.gguf"
    build_model(spec, path)
    return path


def test_policy_drafts_deep_at_full_acceptance(deep_full):
    lm = load(LoadSpec(deep_full, mtp=MtpSource.INTEGRATED, max_draft_depth=6))
    try:
        chosen = _chosen_after_warmup(lm, AdaptiveDepth(6), PROMPTS)
        deep = sum(n for k, n in chosen.items() if k >= 2)
        assert deep / sum(chosen.values()) > 0.8, chosen
    finally:
        lm.close()


# ------------------------------------------------------- with simulated rounds
def _simulate(
    policy: AdaptiveDepth, rounds: int, accept, verify_ms, step_ms=0.5, sync_ms=0.5, python_ms=0.0
) -> list[int]:
    """Drive the policy with rounds whose costs and acceptance follow the given model
    (one generation: consecutive rounds, each ending ``python_ms`` after its parts)."""
    picked = []
    t = 0.0
    for i in range(rounds):
        k = policy.next_depth()
        picked.append(k)
        a = 0
        while a < k and accept(i, a):
            a += 1
        draft = 0.0 if k == 0 else sync_ms + (k - 1) * step_ms
        verify = verify_ms(k + 1)
        t += (draft + verify + python_ms) / 1000
        policy.observe(
            RoundStats(
                index=i,
                depth=k,
                drafted=k,
                accepted=a,
                emitted=a + 1,
                draft_settle_ms=draft,
                verify_ms=verify,
                t=t,
                sync_rows=1 if k else 0,
                sync_ms=sync_ms if k else 0.0,
            )
        )
    return picked


def test_flat_verify_and_full_acceptance_goes_to_max_depth():
    picked = _simulate(AdaptiveDepth(8), 200, lambda i, a: True, lambda n: 10 + 0.2 * n)
    assert picked[-50:].count(8) > 40


def test_steep_verify_at_half_acceptance_stops_drafting():
    # CPU-like: a verify of 2 rows costs 1.7x one row
    picked = _simulate(AdaptiveDepth(8), 300, lambda i, a: (i * 7 + a) % 2 == 0, lambda n: 10 if n == 1 else 17 + 2 * n)
    assert picked[-100:].count(0) > 90


def test_cheap_drafts_that_are_never_accepted_are_still_turned_off():
    """A small model on a fast machine: a draft costs ~3% of a verify. The optimistic
    prior must fade with the evidence, or it alone would keep the acceptance estimate
    above the cost and drafting on forever at zero acceptance."""
    policy = AdaptiveDepth(6)
    picked = _simulate(policy, 1000, lambda i, a: False, lambda n: 10 + 0.1 * n, step_ms=0.1, sync_ms=0.1)
    assert picked[-500:].count(0) > 490, policy.depth_counts
    assert policy.acceptances()[0] < 0.05  # the optimistic prior (0.7) has faded


def test_an_unlucky_stretch_does_not_keep_a_paying_head_switched_off():
    """CPU-like costs at 60% acceptance: depth 2 is 13% faster than plain decoding, but
    only just above break-even (~47%), so a run of rejections turns drafting off. The
    evidence that did so must soon give way to what probes find."""
    verify = {1: 10.5, 2: 15.5, 3: 16.5, 4: 20.0, 5: 21, 6: 25, 7: 26, 8: 29, 9: 31}
    off = 0
    for seed in range(8):
        rng = random.Random(seed)
        picked = _simulate(AdaptiveDepth(8), 2000, lambda i, a: rng.random() < 0.6, verify.__getitem__, 0.8, 0.9)
        off += picked[-1000:].count(0)
    assert off / 8000 < 0.3  # a policy that trusted the stretch: 86%


def test_probes_back_off_while_drafts_fail_and_recover_when_they_succeed():
    policy = AdaptiveDepth(4)
    good = {"on": False}
    picked = _simulate(policy, 2000, lambda i, a: good["on"], lambda n: 10 + 3 * n)
    assert policy.probe_gap == PROBE_MAX
    assert sum(1 for k in picked[-1000:] if k) <= 1000 // PROBE_MAX * 2 + 2  # rare probes
    good["on"] = True
    picked = _simulate(policy, 400, lambda i, a: good["on"], lambda n: 10 + 3 * n)
    assert policy.probe_gap == PROBE_MIN
    assert picked[-50:].count(4) > 40  # drafting is back, at full depth


def test_first_sample_at_a_batch_size_does_not_rule_it_out():
    """The first verify at a new size pays graph set-up (here 10x); the depth must
    still be chosen once its true cost is known."""
    seen: dict[int, int] = {}

    def verify(n):
        seen[n] = seen.get(n, 0) + 1
        return (10 + 0.5 * n) * (10 if seen[n] == 1 else 1)

    picked = _simulate(AdaptiveDepth(6), 400, lambda i, a: True, verify)
    assert picked[-50:].count(6) > 40


def test_slow_early_plain_samples_do_not_keep_drafting_on():
    """A busy machine makes the first plain decodes 6x slow: drafting looks better than
    it is. Plain decoding must be re-measured while drafting, so a model whose drafts
    are never accepted still ends up not drafting."""
    plain = {"n": 0}

    def verify(n):
        if n == 1:
            plain["n"] += 1
            return 60.0 if plain["n"] <= 3 else 10.0
        return 17 + 2 * n

    policy = AdaptiveDepth(4)
    picked = _simulate(policy, 600, lambda i, a: False, verify)
    assert picked[-200:].count(0) > 190, policy.depth_counts
    assert policy.verify_ms(1) < 11


def test_plain_decoding_far_behind_is_not_tried_again_once_measured():
    """Depth 1 earns ~70% more than plain decoding here. Plain is timed at the start and
    in the first tries; once a full window of its verify times says it is far behind, the
    tries of it stop (each cost a few rounds of a fresh session's first tokens). Where it
    is close, or its window is not full, it is still tried: the safety net."""
    rng = random.Random(3)
    far = _simulate(
        AdaptiveDepth(2),
        1500,
        lambda i, a: a == 0 and rng.random() < 0.9,
        lambda n: 10 + 0.5 * (n - 1),
        step_ms=8.0,
        sync_ms=0.5,
    )
    assert far[:300].count(0) >= 10  # the first timing and tries
    assert far[300:].count(0) == 0, far[300:].count(0)
    rng = random.Random(3)
    close = _simulate(
        AdaptiveDepth(2),
        1500,
        lambda i, a: a == 0 and rng.random() < 0.3,
        lambda n: 10 + 0.5 * (n - 1),
        step_ms=8.0,
        sync_ms=0.5,
    )
    assert close[300:].count(0) > 0


def test_adaptive_rejects_bad_max_depth():
    with pytest.raises(ValueError):
        AdaptiveDepth(0)


def test_engine_keeps_one_auto_policy_per_model_and_it_survives_a_restart(fixtures, tmp_path, monkeypatch):
    """What auto learns carries over: one policy per loaded model across requests, saved
    after each; after a restart the model's policy starts from exactly what was saved; a
    changed file starts afresh. Output is plain greedy throughout. (How many drafts a
    request makes depends on this machine's timings, which the full suite's process can
    skew: CI drafted 75 then 123 where 10 then 0 is usual; what a restored policy does is
    tested on simulated costs below.)"""
    import os
    import shutil

    from engine.runtime import jobs as J
    from engine.runtime.decode.depth import AUTO
    from engine.runtime.decode.policy.store import load_policy, policy_path
    from engine.runtime.engine import Engine
    from engine.runtime.decode.policy.store import depth_policy

    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    model = tmp_path / "random.gguf"
    shutil.copyfile(fixtures["random"].path, model)
    job = J.Generate(prompt="Hello there, how are", max_tokens=64, draft_depth="auto", ignore_eog=True)
    with Engine() as eng:
        eng.submit(J.LoadModel(LoadSpec(model, max_draft_depth=4))).result(60)
        plain = eng.submit(J.Generate(prompt=job.prompt, max_tokens=64, mtp="off", ignore_eog=True)).result(60)
        first = eng.submit(job).result(60)
        policy = eng.submit(J.Call(lambda st, c, e: st.get(None).auto_policy)).result(10)
        second = eng.submit(job).result(60)
        assert eng.submit(J.Call(lambda st, c, e: st.get(None).auto_policy)).result(10) is policy  # one per model
        learned = policy.state()
    assert first.tokens == second.tokens == plain.tokens
    assert first.stats.drafted > 0 and sum(policy.depth_counts.values()) > 0
    # a restart: the model's policy is the saved one, before any request
    with Engine() as eng:
        eng.submit(J.LoadModel(LoadSpec(model, max_draft_depth=4))).result(60)
        restarted = eng.submit(J.Call(lambda st, c, e: depth_policy(st.get(None), AUTO).state())).result(10)
        assert json.loads(json.dumps(restarted)) == json.loads(json.dumps(learned))
        after = eng.submit(job).result(60)
        assert after.tokens == plain.tokens
        os.utime(model, ns=(1, 1))  # a changed file: nothing learned applies
        fresh = eng.submit(J.Call(lambda st, c, e: load_policy(policy_path(st.get(None)), 4).state())).result(10)
    assert fresh == AdaptiveDepth(4).state()


def test_a_restored_policy_does_not_learn_again_that_drafting_does_not_pay():
    """A policy restored from what it learned (0% acceptance, drafts dear) drafts far less
    over the next request than a fresh one, which must find it out again."""

    def verify(n):
        return 1.0 + 0.3 * (n - 1)

    learned = AdaptiveDepth(4)
    _simulate(learned, 300, lambda i, a: False, verify, step_ms=1.0, sync_ms=1.0)
    restored = AdaptiveDepth.from_state(4, json.loads(json.dumps(learned.state())))
    fresh = AdaptiveDepth(4)
    after = _simulate(restored, 64, lambda i, a: False, verify, step_ms=1.0, sync_ms=1.0)
    before = _simulate(fresh, 64, lambda i, a: False, verify, step_ms=1.0, sync_ms=1.0)
    assert sum(after) < sum(before) / 2, (sum(after), sum(before))


def test_a_restored_policy_times_again_the_depths_it_ruled_out_at_another_speed():
    """Depths 3 and 4 were timed while the machine ran at half speed, so the saved policy
    drafts 2. Now they cost what the others do: the restored policy must time them again,
    though its old figures rule them out, and go deep (it stayed shallow: on the 200 MB
    model, 0.8x depth 3 at four sequences after a benchmark's save)."""
    slow = lambda n: (10 + 0.5 * n) * (1 if n <= 3 else 2)  # noqa: E731
    learned = AdaptiveDepth(4)
    _simulate(learned, 400, lambda i, a: True, slow)
    assert learned.current == 2, learned.depth_counts
    restored = AdaptiveDepth.from_state(4, json.loads(json.dumps(learned.state())))
    picked = _simulate(restored, 600, lambda i, a: True, lambda n: 10 + 0.5 * n)
    assert picked[-100:].count(4) > 80, restored.depth_counts


@pytest.mark.parametrize(
    "state",
    [
        None,
        [],
        {"max_depth": 3},
        {"max_depth": 4, "reach": [1, 2]},
        {"max_depth": 4, "reach": ["x"] * 4},
        {"max_depth": 4, "reach": [float("nan")] * 4, "acc": [0] * 4, "prior_n": [1] * 4},
    ],
)
def test_a_saved_policy_that_does_not_fit_gives_a_fresh_one(state):
    fresh = AdaptiveDepth(4)
    got = AdaptiveDepth.from_state(4, state)
    assert got.state() == fresh.state()


def test_a_policy_round_trips_through_its_state():
    p = AdaptiveDepth(4)
    _simulate(p, 60, lambda i, a: i < 2, lambda n: 10 + 2 * n)
    q = AdaptiveDepth.from_state(4, json.loads(json.dumps(p.state())))
    assert q.state() == p.state() and q.best_depth() == p.best_depth()


def test_an_idle_policy_defers_the_prompts_mtp_entries(fixtures):
    """While drafting is off, a new prompt's MTP entries are not fed (older ones become
    holes, the newest wait in the lag for a probe) — and the output is unchanged."""
    from engine.runtime.decode.drafting.propose import CATCH_UP_LIMIT
    from engine.runtime.decode.entries import HOLE

    lm = load_fixture(fixtures["random"], "integrated", max_depth=6)
    plain = load_fixture(fixtures["random"], "off")
    try:
        policy = AdaptiveDepth(6)
        _chosen_after_warmup(lm, policy, PROMPTS[:2])
        assert policy.idle
        prompt = lm.model.tokenize(" ".join(PROMPTS) * 3)
        s = lm.session
        fed_before = len([t for t in s.draft_tokens if t != HOLE])
        g = generate(s, prompt, DecodeParams(max_tokens=8, depth=policy, ignore_eog=True))
        fed_after = len([t for t in s.draft_tokens if t != HOLE])
        # none of the ~100 prompt entries was fed; at most the newest wait in the lag
        assert fed_after - fed_before <= CATCH_UP_LIMIT and len(prompt) > 3 * CATCH_UP_LIMIT
        assert s.draft_tokens.count(HOLE) >= len(prompt) - 2 * CATCH_UP_LIMIT
        ref = generate(plain.session, prompt, DecodeParams(max_tokens=8, ignore_eog=True))
        assert g.tokens == ref.tokens
        # a fixed depth never defers
        assert not FixedDepth(2).idle
    finally:
        lm.close()
        plain.close()
