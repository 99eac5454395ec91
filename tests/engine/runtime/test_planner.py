"""The round planner on recorded costs: of every plan a round could run, it picks one with
the most expected tokens per millisecond.

The costs are what each depth really cost on the demo (``data/demo_round_costs.json``):
auto learns them from rounds drawn from the recording (as in test_adaptive_traces), and
the planner's verify times by rows are the recorded verifies. The expected tokens and cost
of every candidate — the MTP chain, each width of a suffix draft, the whole suffix draft
followed by each count of the head's drafts, the chain followed by each count of a
match's tokens — are computed here from those costs, independently of the planner's own
arithmetic, over many acceptances, match lengths, rooms and both kinds of rollback."""

from __future__ import annotations

import math
import random

import pytest

from engine.runtime.decode.policy.adaptive import AdaptiveDepth, expected_tokens
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.policy.planner import MTP, MTP_SUFFIX, SUFFIX, SUFFIX_MTP, Plan, RoundPlanner, SuffixLearned
from engine.runtime.decode.policy.tuning import SUFFIX_PRIOR_N, SUFFIX_PRIORS
from tests.engine.runtime.test_adaptive_traces import DEPTHS, MAX, simulate


def _trained(verify_scale: float) -> tuple[AdaptiveDepth, SuffixLearned]:
    """Auto after 3,000 rounds drawn from the recorded demo costs, and suffix learning whose
    verify times by rows are the recorded verifies — each verify ``verify_scale`` times its
    recorded time (the head's steps as recorded)."""
    scaled = {
        k: [
            (verify * verify_scale, draft, sync, wall + verify * (verify_scale - 1)) for verify, draft, sync, wall in rs
        ]
        for k, rs in DEPTHS.items()
    }
    auto = AdaptiveDepth(MAX)
    simulate(auto, 3000, seed=7, depths=scaled)
    learned = SuffixLearned()
    for k, rounds in DEPTHS.items():
        for verify, draft, _sync, _wall in rounds[:9]:
            learned.costs.add_verify(k + 1, verify * verify_scale)
            if k:
                learned.draft_settle_ms.add(draft)
    return auto, learned


@pytest.fixture(scope="module", params=[1.0, 20.0], ids=["demo", "verify-20x"])
def recorded(request) -> tuple[AdaptiveDepth, SuffixLearned]:
    """The demo's recorded costs as they are, and with verifies 20 times dearer than the
    head's steps (a large model whose head is one layer of many)."""
    return _trained(request.param)


def _replays(ps: list[float], v, rollback: int | None) -> list[float]:
    """Expected replay ms of a verify of w drafts, for w in 0..len(ps): a rejection more
    than ``rollback`` drafts deep decodes the kept tokens again (a verify of their rows)."""
    out = []
    for w in range(len(ps) + 1):
        total = 0.0
        if rollback is not None:
            for j in range(max(0, w - rollback)):
                total += math.prod(ps[:j]) * (1 - ps[j]) * v(j + 1)
        out.append(total)
    return out


def _candidates(planner: RoundPlanner, k: int, n: int, b: int, room: int) -> dict[tuple[int, int], float]:
    """Every plan of a round with a chain of ``k`` and ``n`` suffix tokens in bucket ``b``
    (``room`` head drafts may follow them): (suffix tokens, head drafts after them) ->
    expected tokens per ms; (0, 0) is the chain."""
    auto = planner.policy
    L = planner.learned
    v = L.costs.verify_ms
    p = (L.acc[b] + SUFFIX_PRIORS[b] * SUFFIX_PRIOR_N) / (L.reach[b] + SUFFIX_PRIOR_N)
    heads = auto.acceptances()
    out = {(0, 0): expected_tokens(heads[:k])[-1] / auto.costs.round_ms(k)}
    ps = [p] * n
    rep = _replays(ps, v, planner.rollback)
    for w in range(1, n + 1):
        out[(w, 0)] = sum(p**j for j in range(w + 1)) / (v(w + 1) + rep[w])
    ps = [p] * n + [heads[min(n + i, len(heads) - 1)] for i in range(room)]
    rep = _replays(ps, v, planner.rollback)
    sync, step = auto.costs.sync_ms(), auto.costs.step_ms()
    for t in range(1, room + 1):
        e = sum(math.prod(ps[:j]) for j in range(n + t + 1))
        out[(n, t)] = e / (v(n + 1 + t) + rep[n + t] + sync + (n + t - 1) * step)
    return out


def _learned_with(base: SuffixLearned, rng: random.Random) -> SuffixLearned:
    L = SuffixLearned()
    L.costs, L.draft_settle_ms = base.costs, base.draft_settle_ms
    for b in range(3):
        L.reach[b] = rng.uniform(0.0, 40.0)
        L.acc[b] = L.reach[b] * rng.choice([0.0, 0.3, 0.6, 0.85, 0.97, 1.0])
    return L


@pytest.mark.parametrize("rollback", [None, 2], ids=["attention", "recurrent"])
def test_the_planner_never_picks_a_plan_that_expects_fewer_tokens_per_ms(recorded, rollback):
    auto, base = recorded
    rng = random.Random(11 if rollback is None else 12)
    kinds = set()
    for _ in range(300):
        planner = RoundPlanner(auto, _learned_with(base, rng), follows=True, rollback=rollback)
        k = rng.randint(0, MAX)
        n = rng.randint(1, 16)
        length = rng.choice([3, 4, 8, 16])
        rows = n + rng.choice([0, 0, 2, 8])  # the match ended before the widest verify or not
        tokens = list(range(100, 100 + n))
        plan = planner.plan(k, rows, [], lambda width: (tokens[:width], length))
        b = 0 if length >= 8 else 1 if length >= 4 else 2
        rates = _candidates(planner, k, n, b, rows - n)
        picked = {MTP: (0, 0), SUFFIX: (plan.suffix, 0), SUFFIX_MTP: (plan.suffix, plan.depth)}[plan.drafter]
        assert rates[picked] >= max(rates.values()) * (1 - 1e-9), (plan, picked, max(rates, key=rates.get))
        kinds.add(plan.drafter)
        if plan.drafter == MTP:
            assert plan.depth == k and not plan.tokens
        else:
            assert plan.tokens == tokens[: plan.suffix]
    # the draws reach every kind of plan the costs allow (on the demo a head step costs more
    # than a suffix token could earn after a whole draft)
    assert kinds >= {MTP, SUFFIX} and (SUFFIX_MTP in kinds) == (base.costs.verify_ms(1) > 1.0)


def test_a_chain_is_extended_by_a_match_only_as_far_as_that_pays(recorded):
    auto, base = recorded
    rng = random.Random(5)
    taken = set()
    for _ in range(300):
        rollback = rng.choice([None, 1, 3])
        planner = RoundPlanner(auto, _learned_with(base, rng), follows=True, rollback=rollback)
        k = rng.randint(1, MAX)
        e = rng.randint(1, 12)
        length = rng.choice([3, 4, 8])
        b = 0 if length >= 8 else 1 if length >= 4 else 2
        plan = Plan(MTP, k, chain=k)
        more = planner.extension(plan, k, (list(range(e)), length))
        # reference: the chain's tokens and cost, then each count of the match's tokens
        L, v = planner.learned, planner.learned.costs.verify_ms
        p = (L.acc[b] + SUFFIX_PRIORS[b] * SUFFIX_PRIOR_N) / (L.reach[b] + SUFFIX_PRIOR_N)
        heads = auto.acceptances()[:k]
        ps = heads + [p] * e
        rep = _replays(ps, v, rollback)
        chain_e, chain_ms = expected_tokens(heads)[-1], auto.costs.round_ms(k)
        rates = [chain_e / chain_ms]
        for w in range(1, e + 1):
            gain = sum(math.prod(ps[: k + j]) for j in range(1, w + 1))
            rates.append((chain_e + gain) / (chain_ms + v(k + 1 + w) - v(k + 1) + rep[k + w] - rep[k]))
        assert rates[len(more)] >= max(rates) * (1 - 1e-9)
        assert plan.drafter == (MTP_SUFFIX if more else MTP) and plan.suffix == len(more)
        taken.add(bool(more))
    assert taken == {True, False}


def test_a_forced_run_is_the_plan_whatever_else_could_be_drafted(recorded):
    auto, base = recorded
    planner = RoundPlanner(auto, base, follows=True)
    plan = planner.plan(3, 10, [7, 8], lambda width: (list(range(width)), 16))
    assert plan.drafter == "forced" and plan.tokens == [7, 8] and plan.depth == 0


def test_at_a_fixed_depth_the_chain_is_priced_by_what_the_planner_measured():
    """Without auto's estimates the chain costs a verify of its rows plus the measured
    draft time, and its drafts are accepted at the rate learned from kept chains."""
    L = SuffixLearned()
    for rows, ms in ((3, 1.2), (4, 1.3), (5, 1.4)):
        for _ in range(3):
            L.costs.add_verify(rows, ms)
    L.draft_settle_ms.add(0.4)
    planner = RoundPlanner(FixedDepth(3), L)
    for _ in range(30):  # chains of 3 that keep 1: of the 2 drafts reached, 1 kept
        planner.kept(Plan(MTP, 3, chain=3), 1)
    p = planner._fixed_acceptance()
    assert 0.45 < p < 0.55
    assert planner.mtp_rate(3) == pytest.approx((1 + p + p * p + p**3) / (1.3 + 0.4))


def test_in_slots_the_planner_prices_the_chain_with_auto_while_a_sequence_decodes_alone():
    """A slot's depth policy (SteppedDepth) hands the planner auto's estimates while its
    sequence decodes alone (a model with one slot included: before one decode path, such a
    model's planner read auto directly); beside others, and at a fixed depth, none (the
    planner's own measurements by the step's rows)."""
    from types import SimpleNamespace

    from engine.runtime.decode.policy.costs import RoundCosts
    from engine.runtime.decode.policy.steps import SteppedDepth

    clock = SimpleNamespace(active=1, steps=0, step_t=0.0, verify_costs=RoundCosts(1))
    inner = AdaptiveDepth(MAX)
    planner = RoundPlanner(SteppedDepth(inner, clock, {}), SuffixLearned(), follows=True)
    assert planner._auto is inner
    clock.active = 2
    assert planner._auto is None
    fixed = RoundPlanner(SteppedDepth(FixedDepth(3), clock, {}), SuffixLearned())
    assert fixed._auto is None
