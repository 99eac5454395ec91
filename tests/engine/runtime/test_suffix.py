"""Drafts from the conversation itself (engine.runtime.decode.drafting.suffix): the index's matches,
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
from engine.runtime.decode.policy.base import NO_HEAD, FixedDepth
from engine.runtime.decode.sampling import SamplingParams
from engine.runtime.decode.policy.planner import RoundPlanner, SuffixLearned
from engine.runtime.decode.drafting.suffix import MIN_MATCH, OutputStore, SuffixIndex
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
    loop = SuffixIndex()
    loop.extend([7, 1, 2, 3, 1, 2, 3])  # a text that repeats: the draft goes on repeating it
    assert loop.propose(7) == ([1, 2, 3, 1, 2, 3, 1], 3)
    assert MIN_MATCH == 3
    ix2 = SuffixIndex()
    seq = [10, 11, 12, 13, 14, 15, 16, 17, 18, 50, 11, 12, 13, 14, 15, 16, 17, 18]
    ix2.extend(seq)
    tokens, n = ix2.propose(2)
    assert n == 8 and tokens == [50, 11]  # the longest length that matched, and never past the end
    # a prompt is indexed in bulk: the same index as token by token
    import random

    rng = random.Random(3)
    seq = [rng.randrange(5) for _ in range(3000)]
    bulk, one = SuffixIndex(), SuffixIndex()
    bulk.extend(seq)
    for t in seq:
        one.extend([t])
    assert bulk._ends == one._ends and bulk.propose(16) == one.propose(16)
    assert bulk.propose(16)[0]  # 5 symbols: the newest tokens occurred before


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


def _gen(lm, prompt, outputs=None, **kw):
    lm.session.reset()
    return generate(lm.session, prompt, DecodeParams(max_tokens=100, ignore_eog=True, **kw), outputs=outputs)


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
    from engine.runtime.decider import _constraint

    def run(**kw):
        c = _constraint(spec, lm.model, frozenset())
        return _gen(lm, prompt, constraint=c, **kw)

    plain = run().tokens
    assert run(depth=FixedDepth(2), suffix_drafts=True).tokens == plain


class _Costs:
    """A cost model's estimates (what the choice reads of it): verifies of w rows cost
    1 + 0.1 w ms, a round of depth k that verify plus k draft steps."""

    def __init__(self, verify, draft_settle_ms):
        self.verify, self.draft_settle_ms = verify, draft_settle_ms

    def verify_ms(self, rows: int) -> float:
        return self.verify(rows)

    def verify_table(self, n: int) -> list[float]:
        return [0.0] + [self.verify(r) for r in range(1, n + 1)]

    def round_ms(self, k: int) -> float:
        return self.verify(k + 1) + self.draft_settle_ms * k

    def sync_ms(self) -> float:
        return self.draft_settle_ms

    def step_ms(self) -> float:
        return self.draft_settle_ms


class _Policy:
    """A depth policy's estimates as the suffix choice reads them (its only seam)."""

    max_depth = 4

    def __init__(self, p_mtp, verify, draft_settle_ms):
        self.p_mtp = p_mtp
        self.costs = _Costs(verify, draft_settle_ms)

    def acceptances(self):
        return [self.p_mtp] * self.max_depth

    def estimates(self):
        return self

    def rates(self):
        """Expected tokens of a chain of depth k over its round's cost, as AdaptiveDepth's."""
        return [sum(self.p_mtp**i for i in range(k + 1)) / self.costs.round_ms(k) for k in range(self.max_depth + 1)]


def _consistent_policy(p_mtp: float, draft_settle_ms: float = 0.3) -> _Policy:
    return _Policy(p_mtp, lambda rows: 1.0 + 0.1 * rows, draft_settle_ms)


def _source(policy) -> RoundPlanner:
    """A planner over ``policy`` (a depth learner, or none: NO_HEAD) with suffix drafts on."""
    return RoundPlanner(policy, SuffixLearned(), head=policy is not NO_HEAD, follows=True)


def test_the_choice_never_takes_the_source_expected_to_earn_less():
    src = _source(_consistent_policy(0.8))
    verify = lambda rows: 1.0 + 0.1 * rows  # noqa: E731
    for k in range(5):
        for bucket in range(3):
            for width in (1, 4, 15):
                p = src.acceptance(bucket)
                rates = [sum(p**i for i in range(w + 1)) / verify(w + 1) for w in range(width + 1)]
                taken = src.suffix_width(width, bucket, k)
                mtp = src.policy.rates()[k]
                if taken:  # the width that earns most, and more than the chain
                    assert rates[taken] == max(rates[1:]) and rates[taken] > mtp
                else:  # no width would earn more than the chain
                    assert max(rates[1:]) <= mtp
    # a bucket whose drafts were all rejected loses to a chain that pays, at any width
    src.learned.acc[0], src.learned.reach[0] = 0.0, 50.0
    assert not any(src.suffix_width(w, 0, 2) for w in (1, 4, 15))
    # ... and one always accepted wins over it, at its full width
    src.learned.acc[1], src.learned.reach[1] = 50.0, 50.0
    assert src.suffix_width(15, 1, 2) == 15


def test_without_a_cost_model_the_choice_uses_its_own_verify_times():
    """A fixed depth or no MTP head: verify times measured by the source itself."""
    from engine.runtime.decode.stats import RoundStats

    src = _source(NO_HEAD)
    for rows, ms in ((1, 1.0), (5, 1.4), (17, 6.0)):  # verifies cost more past some width
        for _ in range(3):
            src.observe(
                RoundStats(
                    index=0,
                    depth=rows - 1,
                    drafted=rows - 1,
                    accepted=0,
                    emitted=1,
                    draft_settle_ms=0.0,
                    verify_ms=ms,
                    t=0.0,
                    drafter="suffix",
                ),
                constrained=False,
            )
    src.learned.acc[2], src.learned.reach[2] = 9.0, 10.0  # p = 0.88
    w = src.suffix_width(16, 2, 0)
    assert 1 <= w < 16  # worth drafting, but not the widest verify
    p = src.acceptance(2)
    rate = lambda w: sum(p**i for i in range(w + 1)) / src.verify_ms(w + 1)  # noqa: E731
    assert rate(w) == max(rate(x) for x in range(1, 17)) and rate(w) > 1.0 / src.verify_ms(1)
    src.learned.acc[2], src.learned.reach[2] = 0.0, 40.0  # never accepted: plain decoding earns more
    assert src.suffix_width(16, 2, 0) == 0


def test_the_store_of_recent_outputs_is_bounded_and_drafts_across_requests():
    store = OutputStore(limit=100)
    for i in range(10):
        store.add([1000 * i + j for j in range(30)])
    assert store.tokens <= 100
    assert store.lookup([9000, 9001, 9002], 4) == ([9003, 9004, 9005, 9006], 3)  # the newest is kept
    assert store.lookup([1000, 1001, 1002], 4) == ([], 0)  # the oldest went first
    store.add([7, 7, 7])  # too short to draft from: not stored
    assert store.lookup([9027, 9028, 9029], 4) == ([], 0)  # a draft never runs past an output's end
    assert store.lookup([5, 9000, 9001, 9002], 2)[0] == [9003, 9004]


def test_adding_to_a_full_store_indexes_only_the_new_output(monkeypatch):
    """A full store forgets its oldest outputs in place: each generation's end indexes its
    own tokens, never again every token held (32k tokens took ~50 ms of the engine thread,
    every stream waiting, at each end)."""
    store = OutputStore(limit=100)
    for i in range(10):
        store.add([1000 * i + j for j in range(30)])
    indexed: list[int] = []
    real = SuffixIndex.extend
    monkeypatch.setattr(SuffixIndex, "extend", lambda self, toks: (indexed.append(len(toks)), real(self, toks))[1])
    store.add([5000 + j for j in range(30)])
    assert sum(indexed) == 31  # the output and its separator
    assert store.tokens <= 100
    assert store.lookup([5000, 5001, 5002], 2) == ([5003, 5004], 3)
    assert store.lookup([7000, 7001, 7002], 2) == ([], 0)  # dropped with the oldest: a miss


def test_an_index_forgets_what_it_dropped_and_keeps_the_rest():
    idx = SuffixIndex()
    idx.extend([1, 2, 3, 4, 9, 9, 9, 9, 5, 6, 7, 8])
    idx.drop(6)
    assert idx.lookup([1, 2, 3], 3) == ([], 0)  # ended in the dropped tokens
    assert idx.lookup([9, 9, 5], 2) == ([6, 7], 3)  # starts in them, ends after: kept
    idx.extend([5, 6, 7])
    assert idx.propose(2) == ([8, 5], 3)  # the match of the newest tokens, by absolute position
    for _ in range(40):  # a long life of drops: the stale entries are swept out
        idx.extend(list(range(100, 200)))
        idx.drop(len(idx.tokens) - 50)
    assert idx.tokens == list(range(150, 200))
    assert idx.lookup([150, 151, 152], 2) == ([153, 154], 3)
    assert idx.lookup([140, 141, 142], 2) == ([], 0)
    assert sum(len(e) for e in idx._ends.values()) <= 2 * 4 * max(len(idx.tokens), 64)


def test_a_later_request_drafts_from_an_earlier_output(copying):
    """The bigram fixture's answer depends on the last token only: a short prompt gets the
    answer an earlier request got, which its own prompt does not hold."""
    lm, _ = copying
    prompt = lm.model.prompt_tokens("Once upon a time")
    store = OutputStore()
    first = _gen(lm, prompt, depth=FixedDepth(2))
    store.add(first.tokens)
    again = _gen(
        lm, lm.model.prompt_tokens("Twice upon a time"), depth=FixedDepth(2), suffix_drafts=True, outputs=store
    )
    alone = _gen(lm, lm.model.prompt_tokens("Twice upon a time"), depth=FixedDepth(2), suffix_drafts=True)
    assert again.tokens == alone.tokens == _gen(lm, lm.model.prompt_tokens("Twice upon a time")).tokens
    assert again.stats.suffix_accepted > alone.stats.suffix_accepted
    assert again.stats.target_forwards < alone.stats.target_forwards


@pytest.mark.parametrize("arm", list(ARMS))
def test_suffix_drafts_without_an_mtp_head(copying, arm):
    """MTP off (the same happens on a model with no head): suffix drafts or plain rounds."""
    lm, prompt = copying
    kw = ARMS[arm]
    plain = _gen(lm, prompt, **kw)
    only = _gen(lm, prompt, suffix_drafts=True, **kw)
    assert only.tokens == plain.tokens
    if arm == "greedy":
        assert only.stats.suffix_accepted > 0 and only.stats.target_forwards < plain.stats.target_forwards


def test_the_endpoint_field_reaches_the_decoder(fixtures):
    with Engine() as e:
        e.submit(J.LoadModel(LoadSpec(fixtures["full"].path, n_ctx=1024, probe=False, fit="off"))).result()
        start = "Once upon a time there was a small village"
        earlier = e.submit(J.Generate(prompt=start, max_tokens=120, ignore_eog=True, mtp=J.Mtp.OFF)).result().text
        prompt = start + earlier + start
        off = e.submit(J.Generate(prompt=prompt, max_tokens=64, ignore_eog=True, draft_depth=2)).result()
        on = e.submit(
            J.Generate(prompt=prompt, max_tokens=64, ignore_eog=True, draft_depth=2, suffix_drafts=True)
        ).result()
    assert on.tokens == off.tokens
    assert on.stats.suffix_rounds > 0 and off.stats.suffix_rounds == 0


def test_suffix_drafts_are_bit_exact_in_exact_mode(fixtures, tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.engine.runtime.exact_suffix_child", str(fixtures["full"].path), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["identity"].startswith("bit-exact") and r["same"]
    assert r["suffix_accepted"] > 0


@pytest.mark.parametrize("depth", [None, 2])
def test_a_rejection_deeper_than_the_recurrent_rollback_replays_from_a_checkpoint(copying, depth):
    """The fixture is a hybrid: llama.cpp rolls its recurrent state back only ``n_rs_seq``
    tokens (the MTP depth it was sized for), and a suffix draft is wider. Rejected deep in
    a draft, the state goes back to the checkpoint taken before the verify and only the
    kept tokens are decoded again — not the whole context."""
    lm, _ = copying
    prompt = lm.model.prompt_tokens("Once upon a time")
    answer = _gen(lm, prompt).tokens
    changed = list(answer)
    for i in (20, 37, 41, 58, 66, 83):  # the prompt holds the answer with tokens changed
        changed[i] = (changed[i] + 1) % lm.model.n_vocab
    edit = prompt + changed + prompt[1:]
    plain = _gen(lm, edit)
    kw = {"depth": FixedDepth(depth)} if depth else {}
    g = _gen(lm, edit, suffix_drafts=True, **kw)
    assert g.tokens == plain.tokens
    assert lm.session.target.n_rs_seq < 15 and g.stats.suffix_drafted > g.stats.suffix_accepted
    assert g.stats.rollback_replays > 0 and g.stats.rollback_repairs == 0
    assert g.stats.target_forwards < plain.stats.target_forwards / 2


def test_an_mtp_chain_that_runs_into_an_earlier_match_is_extended_by_it(copying):
    """After a changed token the copy goes on: once the MTP chain's last tokens match the
    prompt again, what followed there is appended to the same verify."""
    lm, _ = copying
    prompt = lm.model.prompt_tokens("Once upon a time")
    answer = _gen(lm, prompt).tokens
    changed = list(answer)
    for i in (20, 45, 70):
        changed[i] = (changed[i] + 1) % lm.model.n_vocab
    edit = prompt + changed + prompt[1:]
    plain = _gen(lm, edit).tokens
    rounds = []
    lm.session.reset()
    g = generate(
        lm.session,
        edit,
        DecodeParams(max_tokens=100, ignore_eog=True, depth=FixedDepth(3), suffix_drafts=True),
        on_round=rounds.append,
    )
    assert g.tokens == plain
    ext = [r for r in rounds if r.drafter == "mtp+suffix"]
    assert ext and all(0 < r.extended < r.drafted for r in ext)
    assert sum(r.extended for r in ext) <= g.stats.suffix_drafted


def test_the_head_goes_on_after_a_suffix_draft_only_where_that_pays():
    """A suffix draft whose match ended: the head's drafts are appended at the count that
    expects the most tokens per ms, counted only if every suffix token is kept and paying
    a head step per suffix token; none where the head or the suffix draft is unreliable."""
    for p_mtp in (0.3, 0.7, 0.95):
        src = _source(_consistent_policy(p_mtp, draft_settle_ms=0.05))
        src.learned.acc[0], src.learned.reach[0] = 50.0, 50.0  # the suffix draft is always kept
        p = src.acceptance(0)
        for width, room in ((2, 13), (8, 7)):

            def rate(i):
                e = sum(p**j for j in range(width + 1)) + sum(p**width * p_mtp**j for j in range(1, i + 1))
                return e / (1.0 + 0.1 * (width + 1 + i) + (0.05 * (width + i) if i else 0.0))

            best = max(range(room + 1), key=rate)
            taken = src.tail_width(width, 0, room)
            assert rate(taken) == rate(best), (p_mtp, width, taken, best)
    # a head that drafts well but costs as much as a verify row per step never pays after 8 tokens
    src = _source(_consistent_policy(0.95, draft_settle_ms=0.5))
    assert src.tail_width(8, 0, 7) == 0
    # a suffix bucket whose drafts are rejected: the head's drafts after them would never count
    src = _source(_consistent_policy(0.95, draft_settle_ms=0.05))
    src.learned.acc[2], src.learned.reach[2] = 0.0, 50.0
    assert src.tail_width(4, 2, 11) == 0
    assert _source(_consistent_policy(0.95, draft_settle_ms=0.05)).tail_width(4, 0, 11) > 0


def test_a_suffix_draft_whose_match_ends_is_extended_by_the_head(copying):
    """An earlier output holds the answer's first tokens only: where its match runs out, the
    head's chain goes on in the same verify. The output is plain decoding's."""
    lm, _ = copying
    prompt = lm.model.prompt_tokens("Once upon a time")
    answer = _gen(lm, prompt).tokens
    store = OutputStore()
    store.add(answer[:24])
    # what the choice has learned: costs where verify rows and head steps are cheap, as
    # on a large model (on this tiny fixture every decode costs about the same, and it would
    # rightly never pay a head step per suffix token), and drafts of either source that are kept
    L = store.learned
    L.acc, L.reach = [50.0] * 3, [50.0] * 3
    for _ in range(9):
        for rows in range(1, 65):
            L.costs.add_verify(rows, 1.0 + 0.02 * rows)
        L.draft_settle_ms.add(0.03)
    L.mtp_acc = L.mtp_reach = 50.0
    other = lm.model.prompt_tokens("Twice upon a time")
    plain = _gen(lm, other).tokens
    rounds = []
    lm.session.reset()
    g = generate(
        lm.session,
        other,
        DecodeParams(max_tokens=100, ignore_eog=True, depth=FixedDepth(3), suffix_drafts=True),
        outputs=store,
        on_round=rounds.append,
    )
    assert g.tokens == plain
    tail = [r for r in rounds if r.drafter == "suffix+mtp"]
    assert tail and all(0 < r.extended < r.drafted for r in tail)
    assert sum(r.accepted for r in tail) > sum(r.drafted - r.extended for r in tail)  # the head's drafts were kept
    # the suffix tokens count as suffix drafts; the head's after them in its totals, not by position
    assert g.stats.suffix_drafted == sum(r.split()[0] for r in rounds)
    assert sum(g.stats.drafted_at) == sum(r.split()[2] for r in rounds if r.drafter != "suffix+mtp")


def test_on_a_recurrent_model_the_width_pays_for_its_replays():
    """A rejection deeper than llama.cpp's recurrent rollback is repaired by decoding the
    kept tokens again: a wide draft that is likely to be cut deep costs more there."""
    src = _source(_consistent_policy(0.1))
    src.learned.acc[1], src.learned.reach[1] = 8.0, 10.0  # p ~ 0.8
    p = src.acceptance(1)
    v = lambda rows: 1.0 + 0.1 * rows  # noqa: E731
    src.rollback = None  # attention only: any depth rolls back in place
    free = src.suffix_width(63, 1, 0)
    src.rollback = 3

    def rate(w):
        replay = sum(p**j * (1 - p) * v(j + 1) for j in range(max(0, w - 3)))
        return sum(p**i for i in range(w + 1)) / (v(w + 1) + replay)

    taken = src.suffix_width(63, 1, 0)
    assert rate(taken) == max(rate(w) for w in range(1, 64))
    assert taken < free


def test_in_slots_a_width_is_priced_as_the_step_it_makes():
    """With other sequences in the step, a verify lasts the whole step: its time is kept by
    the step's rows, and a width is priced as the step it would make with the same company."""
    from engine.runtime.decode.stats import RoundStats

    src = _source(NO_HEAD)
    for _ in range(3):  # 4 of this sequence's rows in steps of 12 (8 of the others')
        src.observe(
            RoundStats(
                index=0,
                depth=3,
                drafted=3,
                accepted=3,
                emitted=4,
                draft_settle_ms=0.0,
                verify_ms=6.0,
                t=0.0,
                drafter="suffix",
                step_rows=12,
            ),
            constrained=False,
        )
    assert sorted(src.learned.costs.verify) == [12]
    assert src.verify_ms(4) == 6.0  # 4 rows of its own: the step of 12 it was measured in
    assert src.verify_ms(1) < 6.0 < src.verify_ms(20)
    for _ in range(3):  # alone: the round's own rows
        src.observe(
            RoundStats(
                index=0,
                depth=3,
                drafted=3,
                accepted=3,
                emitted=4,
                draft_settle_ms=0.0,
                verify_ms=2.0,
                t=0.0,
                drafter="suffix",
                step_rows=4,
            ),
            constrained=False,
        )
    assert src.verify_ms(4) == 2.0 and src.verify_ms(12) == 6.0  # one table: the rows of a whole decode
