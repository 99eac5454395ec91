"""Draft depth in slots: one choice per step for every sequence of it, by the step's goodput
on given step costs, learned per batch size and kept with the model's policy."""

from __future__ import annotations

import json

import pytest

from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.costs import RoundCosts
from engine.runtime.decode.policy.store import load_policy, save_policy
from engine.runtime.decode.stats import RoundStats
from engine.runtime.decode.policy.steps import SteppedDepth, StepDepth


class Clock:
    """What a step's depth reads of the batcher: how many sequences take part, the target
    steps run, when the last ended, and the target decodes' times by total rows (the
    cost model below sets them)."""

    def __init__(self, active: int):
        self.active = active
        self.steps = 0
        self.step_t = 0.0
        self.verify_costs = RoundCosts(1)
        self.tokens = 0


def _target_ms(rows: int) -> float:
    """A verify on a machine memory-bound up to 4 rows, compute-bound past them."""
    return 10.0 + 2.5 * max(0, rows - 4)


DRAFT_MS = 1.0  # one MTP decode, for every drafting sequence at once


def _steps(policies: list, clock: Clock, steps: int, accept, seed: int = 1, target_ms=None) -> list[list[int]]:
    """Run ``steps`` lockstep steps of ``len(policies)`` sequences: each drafts at the depth
    it asked for (one MTP decode per draft position, all sequences at once), then one
    target decode carries every sequence's rows; each sequence's drafts are accepted with
    probability ``accept`` each (one for all, or one per sequence), in turn. As the
    sequences' threads do, each tells of its round and asks for the next before the next
    sequence tells of its own. Returns each step's depths; ``clock.tokens`` counts the
    tokens emitted."""
    import random

    rng = random.Random(seed)
    target_ms = target_ms or _target_ms
    if callable(accept):  # by step and sequence
        rate = accept
    elif isinstance(accept, list):

        def rate(i, j):
            return accept[j]  # noqa: E704
    else:

        def rate(i, j):
            return accept  # noqa: E704

    out = []
    depths = [p.next_depth() for p in policies]
    for i in range(steps):
        out.append(depths)
        draft = max(depths) * DRAFT_MS
        verify = target_ms(sum(d + 1 for d in depths))
        clock.step_t += (draft + verify) / 1000
        clock.steps += 1
        clock.verify_costs.add_verify(sum(d + 1 for d in depths), verify)
        rows, after = sum(d + 1 for d in depths), []
        for j, (p, k) in enumerate(zip(policies, depths)):
            a, q = 0, rate(i, j)
            while a < k and rng.random() < q:
                a += 1
            clock.tokens += a + 1
            p.observe(
                RoundStats(
                    index=i,
                    depth=k,
                    drafted=k,
                    accepted=a,
                    emitted=a + 1,
                    draft_settle_ms=draft,
                    verify_ms=verify,
                    t=clock.step_t,
                    sync_rows=1 if k else 0,
                    sync_ms=DRAFT_MS if k else 0.0,
                    step_rows=rows,
                )
            )
            after.append(p.next_depth())
        depths = after
    return out


def _seqs(model: AdaptiveDepth, clock: Clock, n: int) -> list[SteppedDepth]:
    """``n`` sequences' policies over one model's, sharing the steps' (as a pool's slots do)."""
    steppers: dict = {}
    return [SteppedDepth(model, clock, steppers) for _ in range(n)]


def _goodput(n: int, d: int, accept: float) -> float:
    tokens = sum(accept**i for i in range(d + 1))
    return n * tokens / (d * DRAFT_MS + _target_ms(n * (d + 1)))


def test_every_sequence_of_a_step_drafts_the_steps_depth():
    """One choice per step: the first sequence to ask gets the policy's, the others the
    same; the policy counts one round per step, not one per sequence."""
    model = AdaptiveDepth(4)
    clock, steppers = Clock(3), {}
    seqs = [SteppedDepth(model, clock, steppers) for _ in range(3)]
    picked = _steps(seqs, clock, 120, 0.7)
    assert all(len(set(d)) == 1 for d in picked)
    assert len({d[0] for d in picked}) > 1  # it did choose: tries and changes, not one depth throughout
    step = model.batch[3]
    assert sum(step.depth_counts.values()) == 121  # the steps run and the one asked for after them
    assert sum(model.depth_counts.values()) == 0  # the model's own policy (alone) was not asked


def test_a_steps_time_is_taken_once_and_its_acceptance_from_every_sequence():
    """... and a step that carried a joining request's prompt rows besides is not timed."""
    p = AdaptiveDepth(4)
    s = StepDepth(p, 2)
    t, drafting = 0.0, 0
    for step in range(12):
        k, choice = s.depth(step)
        assert s.depth(step) == (k, choice)  # the second sequence of the step: the same choice
        drafting += k > 0
        prompt = 128 if step == 6 else 0
        t += 0.02 + prompt * 0.001
        for seq in range(2):
            s.observe(
                RoundStats(
                    index=step,
                    depth=k,
                    drafted=k,
                    accepted=k,
                    emitted=k + 1,
                    draft_settle_ms=1.0,
                    verify_ms=15.0,
                    t=t + seq * 0.001,
                    sync_rows=1 if k else 0,
                    step_rows=2 * (k + 1) + prompt,
                ),
                choice,
                step + 1,
                t,
            )
    timed = [x for ws in (p.costs.wall, p.costs.transition) for w in ws.values() for x in w.xs]
    assert len(timed) == 10  # one per step after the first (steady or a change of depth) but the prompt's ...
    assert all(abs(x - 20.0) < 1e-6 for x in timed)  # ... each the step's period on the batcher's clock
    assert sum(p.depth_counts.values()) == 12  # one choice per step
    assert drafting and 0.9 * 2 * drafting < p.reach[0] <= 2 * drafting  # both sequences' drafts (decayed)


def test_the_steps_depth_follows_the_steps_goodput_on_given_costs():
    """Where a verify turns compute-bound past 4 rows, drafting pays alone and not with four
    sequences: the step policy of four stops drafting (probes aside) while the model's own
    policy alone drafts deep, and the step policy of two takes the depth with the most
    tokens per ms of the whole step."""
    accept = 0.8
    best = {n: max(range(5), key=lambda d: _goodput(n, d, accept)) for n in (1, 2, 4)}
    assert best[1] >= 3 and best[4] == 0 and 0 < best[2] < best[1]  # the costs mean what the test says

    alone = AdaptiveDepth(4)
    clock = Clock(1)
    picked = _steps([SteppedDepth(alone, clock, {})], clock, 300, accept)
    assert [d[0] for d in picked[-100:]].count(best[1]) > 70

    for n in (2, 4):
        clock, steppers = Clock(n), {}
        seqs = [SteppedDepth(alone, clock, steppers) for _ in range(n)]
        picked = _steps(seqs, clock, 400, accept, seed=n)
        tail = [d[0] for d in picked[-150:]]
        assert tail.count(best[n]) > 0.75 * len(tail), (n, best[n], tail)


def test_a_step_of_four_probes_as_seldom_as_a_round_alone_where_drafts_fail():
    """At near-zero acceptance drafting stops, and probes back off: one probe step (every
    sequence drafting once) counts as one probe, however many sequences tell of it, and a
    sequence telling of a probe after another asked the next choice still judges it as a
    probe (judged as a drafting round, it had set the spacing back to its minimum: a
    quarter of the steps drafted)."""
    model = AdaptiveDepth(4)
    clock, steppers = Clock(4), {}
    picked = _steps([SteppedDepth(model, clock, steppers) for _ in range(4)], clock, 600, 0.02)
    drafting = [d[0] > 0 for d in picked[100:]]
    assert sum(drafting) / len(drafting) < 0.02, sum(drafting)
    assert model.batch[4].probe_gap >= 128


def test_a_sequence_whose_drafts_do_not_pay_for_their_rows_sits_the_steps_drafting_out(monkeypatch):
    """Three sequences, two whose drafts are accepted 90% of the time and one whose drafts
    almost never are, on a machine where every verify row costs: the step drafts deep for
    the two, and the third decodes plainly in most of those steps (drafting now and then
    to see whether its text changed). The steps' goodput is higher than when every
    sequence drafts the step's depth, on the same draws."""
    import engine.runtime.decode.policy.steps as B

    def target(rows: int) -> float:
        return 10.0 + 1.0 * rows

    accepts = [0.9, 0.9, 0.02]

    def run() -> tuple[list[list[int]], float]:
        model = AdaptiveDepth(4)
        clock, steppers = Clock(3), {}
        picked = _steps(
            [SteppedDepth(model, clock, steppers) for _ in range(3)], clock, 600, accepts, seed=3, target_ms=target
        )
        return picked, clock.tokens / clock.step_t

    picked, goodput = run()
    tail = picked[200:]
    drafting = [d for d in tail if d[0] > 0]
    assert len(drafting) > 0.8 * len(tail)  # the step drafts for the two
    assert all(d[0] == d[1] for d in tail)  # the two draft the step's depth
    assert sum(d[2] > 0 for d in drafting) < 0.2 * len(drafting)  # the third mostly sits out
    monkeypatch.setattr(B, "SIT_OUT_MARGIN", float("inf"))  # every sequence drafts the step's depth
    uniform, uniform_goodput = run()
    assert all(len(set(d)) == 1 for d in uniform)
    assert goodput > uniform_goodput * 1.05, (goodput, uniform_goodput)


def test_sequences_that_draft_alike_never_sit_out_on_verify_times_from_another_moment():
    """Two sequences whose drafts are all accepted, where the table of verify times by rows
    holds a row count timed while the machine ran 1.7x slower (the case seen on a real
    model: 10 rows at 73.6 ms beside steps of 43 ms): its rows' share of the step is
    read from the table, never its difference in ms, so neither sits out."""
    clock = Clock(2)
    for rows in range(2, 11):
        for _ in range(9):
            clock.verify_costs.add_verify(rows, _target_ms(rows) * (1.7 if rows == 10 else 1.0))
    model = AdaptiveDepth(4)
    picked = _steps(_seqs(model, clock, 2), clock, 300, 1.0)
    assert all(d[0] == d[1] for d in picked)


def test_a_sequence_that_sat_out_drafts_again_once_its_drafts_are_accepted():
    def target(rows: int) -> float:
        return 10.0 + 1.0 * rows

    def accept(i: int, j: int) -> float:
        return 0.9 if j < 2 or i >= 300 else 0.02  # the third's text turns copyable at step 300

    model = AdaptiveDepth(4)
    clock = Clock(3)
    picked = _steps(_seqs(model, clock, 3), clock, 700, accept, seed=5, target_ms=target)
    before, after = picked[150:300], picked[500:]
    assert sum(d[2] > 0 for d in before) < 0.2 * len(before)
    assert sum(d[2] == d[0] > 0 for d in after) > 0.8 * len(after)


def test_batch_sizes_policies_are_saved_and_restored_with_the_models(tmp_path):
    model = AdaptiveDepth(4)
    for n in (2, 4):
        clock, steppers = Clock(n), {}
        _steps([SteppedDepth(model, clock, steppers) for _ in range(n)], clock, 80, 0.8)
    path = tmp_path / "policy.json"
    save_policy(path, model)
    saved = json.loads(path.read_text())
    assert sorted(saved["batch"]) == ["2", "4"]
    back = load_policy(path, 4)
    assert sorted(back.batch) == [2, 4]
    assert back.state() == json.loads(json.dumps(model.state()))
    # a restored batch size goes on from its own choice, not from the model's alone
    clock = Clock(4)
    first = _steps(_seqs(back, clock, 4), clock, 1, 0.8)
    assert first[0][0] == model.batch[4].current


@pytest.mark.parametrize("batch", [{"1": None}, {"x": {}}, {"3": {"max_depth": 5}}, {"2": []}, []])
def test_a_saved_batch_size_that_does_not_fit_is_dropped(batch):
    state = AdaptiveDepth(4).state()
    state["batch"] = batch
    got = AdaptiveDepth.from_state(4, state)
    assert got.batch == {} and got.state() == AdaptiveDepth(4).state()
