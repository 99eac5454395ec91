"""Several sequences of one model decoding together (engine.runtime.slots), through the
real engine on fixtures: a hybrid (qwen35, recurrent state per sequence) and an
attention-only MoE (glm4moe). Each sequence's output equals its output alone, whatever
decodes beside it and whenever it joins or leaves; cancelling one never disturbs another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from engine.errors import QueueFullError
from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from tests.engine.runtime.slothelpers import PROMPTS, alone, engine_with, job


@pytest.fixture(scope="module")
def attention_only(tmp_path_factory) -> Path:
    """glm4moe: attention-only, its MTP layer inside (written in a child process)."""
    out = tmp_path_factory.mktemp("slotfam")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.synth.families", str(out), "glm4moe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(json.loads(done.stdout.strip().splitlines()[-1])["glm4moe"]["target"])


@pytest.fixture(params=["hybrid", "attention"])
def model_path(request, fixtures, attention_only) -> Path:
    return fixtures["partial"].path if request.param == "hybrid" else attention_only


@pytest.mark.parametrize("parallel", [1, 2, 4])
def test_each_sequence_equals_its_output_alone(model_path, parallel):
    jobs = [job(i) for i in range(max(parallel, 2) + 2)]  # more requests than slots: some wait
    want = alone(model_path, jobs)
    with engine_with(model_path, parallel) as e:
        handles = [e.submit(j) for j in jobs]
        got = [h.result() for h in handles]
        slots = e.slots()
    assert [g.tokens for g in got] == want
    assert all(len(t) == 32 for t in want)
    if parallel > 1:
        (info,) = slots.values()
        assert len(info) == parallel and sum(s.requests for s in info) == len(jobs)
        assert all(not s.busy for s in info)
    drafted = [g.stats.drafted for g, j in zip(got, jobs) if j.mtp != J.Mtp.OFF]
    assert sum(drafted) > 0


def test_join_and_leave_mid_stream(fixtures):
    path = fixtures["partial"].path
    long, short = job(0, max_tokens=96), job(2, max_tokens=12)
    want = alone(path, [long, short])
    with engine_with(path, 2) as e:
        seen = threading.Event()
        count = [0]

        def on(ev):
            if isinstance(ev, J.Tokens):
                count[0] += len(ev.tokens)
                if count[0] >= 16:
                    seen.set()

        a = e.submit(long, on_event=on)
        assert seen.wait(60)
        b = e.submit(short)  # joins while the first streams, and leaves before it ends
        rb, ra = b.result(), a.result()
    assert [ra.tokens, rb.tokens] == want


def test_cancelling_one_sequence_leaves_the_other_untouched(fixtures):
    path = fixtures["partial"].path
    keep, drop = job(0, max_tokens=64), job(1, max_tokens=200)
    want = alone(path, [keep])[0]
    with engine_with(path, 2) as e:
        started, ended = threading.Event(), []

        def on(ev):
            if isinstance(ev, J.Tokens):
                started.set()
            elif isinstance(ev, (J.Done, J.Failed)):
                ended.append(ev)

        b = e.submit(drop, on_event=on)
        a = e.submit(keep)
        assert started.wait(60)
        b.cancel()
        ra = a.result()
        assert ra.tokens == want
        for _ in range(600):
            if ended:
                break
            threading.Event().wait(0.1)
        assert isinstance(ended[-1], J.Done) and ended[-1].cancelled
        # the cancelled slot is free at once: a new request runs beside nothing and matches
        assert e.submit(keep).result().tokens == want


def test_prompt_cache_restores_into_a_busy_engine(fixtures):
    path = fixtures["partial"].path
    system = {"role": "system", "content": "You are a careful assistant. " * 6}
    first = J.Generate(
        messages=[system, {"role": "user", "content": "Tell me about cats."}], max_tokens=16, ignore_eog=True
    )
    second = J.Generate(
        messages=[system, {"role": "user", "content": "Tell me about dogs."}], max_tokens=16, ignore_eog=True
    )
    busy = job(0, max_tokens=160)
    want = alone(path, [first, second])
    with engine_with(path, 2) as e:
        b = e.submit(busy)
        r1 = e.submit(first).result()
        r2 = e.submit(second).result()  # its prefix comes from the cache, into whichever slot is free
        b.result()
        info = e.prompt_cache_info()
    assert [r1.tokens, r2.tokens] == want
    # the system prompt's snapshot (a message boundary) is restored for the second
    assert info.hits >= 1 and r2.stats.prompt_tokens_restored > 0


def test_a_full_queue_refuses_work_while_every_slot_is_busy(fixtures):
    path = fixtures["partial"].path
    e = Engine(EngineConfig(max_queue=2)).start()
    try:
        e.submit(J.LoadModel(LoadSpec(path, n_ctx=512, probe=False, fit="off", parallel=2))).result()
        handles, refused = [], None
        for i in range(12):
            try:
                handles.append(e.submit(job(i, max_tokens=200)))
            except QueueFullError as err:
                refused = err
                break
        assert refused is not None and "queue is full" in str(refused)
        for h in handles:
            h.cancel()
        ends = [[ev for ev in h.events(timeout=60) if isinstance(ev, (J.Done, J.Failed))][-1] for h in handles]
        assert all(isinstance(ev, J.Done) for ev in ends)
    finally:
        e.stop()


def test_exact_mode_is_bit_exact_with_four_sequences(fixtures, tmp_path):
    """Exact mode (a child process: it switches process-wide kernels) on the hybrid
    fixture quantized to Q8_0: four sequences decoded together give the tokens each gives
    alone, bit for bit, and every logit row of a batched step equals the row alone."""
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.engine.runtime.exact_slots_child", str(fixtures["partial"].path), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["identity"].startswith("bit-exact")
    assert r["same_tokens"] == [True] * 4 and r["max_logit_diff"] == 0.0


def test_a_joining_prompt_goes_in_bounded_chunks_beside_a_running_stream(fixtures):
    """A request that joins with a long prompt decodes it 128 rows a step beside the running
    stream (which keeps flowing), and both outputs equal their outputs alone."""
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.load.loader import load
    from engine.runtime.slots.seqcontext import PROMPT_ROWS_BESIDE_OTHERS

    path = fixtures["partial"].path
    spec = LoadSpec(path, n_ctx=1024, probe=False, fit="off")
    params = DecodeParams(max_tokens=48, ignore_eog=True, depth=FixedDepth(3))
    long_prompt = " ".join(["the cat sat on the mat and looked at the dog"] * 30)
    solo = load(spec)
    try:
        prompts = [solo.model.prompt_tokens(PROMPTS[0]), solo.model.prompt_tokens(long_prompt)]
        assert len(prompts[1]) > 4 * PROMPT_ROWS_BESIDE_OTHERS
        want = []
        for p in prompts:
            solo.session.reset()
            want.append(generate(solo.session, p, params).tokens)
    finally:
        solo.close()
    from dataclasses import replace

    lm = load(replace(spec, parallel=2))
    try:
        got: list = [None, None]
        streaming = threading.Event()
        slots = [lm.slots.acquire(i) for i in range(2)]

        def run(i: int) -> None:  # on this thread, one of the batcher's sequences
            try:
                got[i] = generate(
                    slots[i].session, prompts[i], params, on_emit=(lambda *a: streaming.set()) if i == 0 else None
                )
            finally:
                lm.slots.release(slots[i])

        lm.slots.batcher.start(lambda: run(0))
        while not streaming.is_set():
            lm.slots.batcher.step_once(0.005)
        lm.slots.batcher.target_decodes.clear()
        lm.slots.batcher.start(lambda: run(1))
        while lm.slots.batcher.active:
            lm.slots.batcher.step_once(0.005)
        rows = [r for r, _ in lm.slots.batcher.target_decodes]
        assert [g.tokens for g in got] == want
        assert max(rows) <= PROMPT_ROWS_BESIDE_OTHERS + 4  # a prompt chunk beside one verify of depth 3
        assert sum(r >= PROMPT_ROWS_BESIDE_OTHERS for r in rows) >= 4  # the prompt took several steps
    finally:
        lm.close()


def test_suffix_drafts_in_slots_equal_each_output_alone(fixtures):
    """Drafts from the conversation while several sequences decode together, on the hybrid
    full fixture (its recurrent state checkpointed per sequence before a wide verify): a
    request whose answer repeats its prompt, beside MTP auto, MTP off and a fixed depth,
    all with suffix drafts; each equals its output alone without them."""
    path = fixtures["full"].path
    with engine_with(path, 1) as e:
        start = "Once upon a time there was a small village"
        earlier = e.submit(J.Generate(prompt=start, max_tokens=120, ignore_eog=True, mtp=J.Mtp.OFF)).result().text
    copy = start + earlier + start
    jobs = [
        J.Generate(prompt=copy, max_tokens=64, ignore_eog=True, draft_depth="auto"),
        J.Generate(prompt=copy, max_tokens=64, ignore_eog=True, mtp=J.Mtp.OFF),
        job(2, max_tokens=48),
        job(3, max_tokens=48),
    ]
    want = alone(path, jobs)
    with engine_with(path, 4) as e:
        got = [h.result() for h in [e.submit(replace(j, suffix_drafts=True)) for j in jobs]]
    assert [g.tokens for g in got] == want
    assert got[0].stats.suffix_accepted > 0 and got[1].stats.suffix_accepted > 0
    # every kept draft saved a forward: the first token is the prompt's, each verify emits its
    # kept drafts and one more (how wide the drafts were is the width choice's, from timings:
    # a benchmark's figure, not this test's)
    st = got[1].stats
    assert 1 + st.target_forwards + st.suffix_accepted == len(want[1]), (st.target_forwards, st.suffix_accepted)


def test_auto_in_slots_chooses_per_step_and_is_saved_with_the_models_policy(fixtures, tmp_path, monkeypatch):
    """Four MTP-auto requests at once: each equals its output alone; the steps they shared
    were chosen by the model's policy for their batch size (one choice per step, not one
    per sequence), and that policy is saved with the model's and comes back after a
    restart."""
    from engine.runtime.decode.depth import AUTO
    from engine.runtime.decode.policy.store import policy_path
    from engine.runtime.decode.policy.store import depth_policy

    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    path = fixtures["full"].path
    jobs = [J.Generate(prompt=PROMPTS[i], max_tokens=96, ignore_eog=True, draft_depth="auto") for i in range(4)]
    want = alone(path, jobs)
    with engine_with(path, 4) as e:
        got = [h.result().tokens for h in [e.submit(j) for j in jobs]]
        policy = e.submit(J.Call(lambda st, c, ev: st.get(None).auto_policy)).result()
        saved = e.submit(J.Call(lambda st, c, ev: json.loads(policy_path(st.get(None)).read_text()))).result()
    assert got == want
    assert policy.batch, "no step of several sequences was chosen by a batch size's policy"
    steps = {n: sum(p.depth_counts.values()) for n, p in policy.batch.items()}
    assert steps.get(4, 0) > 0
    rounds = sum(len(t) for t in got)  # at most one round per token per sequence
    assert sum(steps.values()) < rounds / 2  # one choice per step of four, not one per sequence
    assert sorted(saved["batch"]) == sorted(str(n) for n in policy.batch)
    with engine_with(path, 4) as e:  # a restart goes on from what the batch sizes learned
        back = e.submit(J.Call(lambda st, c, ev: depth_policy(st.get(None), AUTO))).result()
    assert sorted(back.batch) == sorted(int(n) for n in saved["batch"])
    assert back.batch[4].acc == pytest.approx(saved["batch"]["4"]["acc"])  # (the save after the last round to end)


def test_each_conversation_comes_back_to_the_slot_that_holds_it(model_path):
    """Turns of two conversations sent one after the other each go to the slot holding the
    conversation, whose context the prefill reuses (no prompt cache: only the slot itself
    holds it); a new conversation takes the slot idle longest, so the most recent stays."""
    with engine_with(model_path, 2, prompt_cache_mb=0) as e:
        tok = lambda text: e.submit(J.Call(lambda st, c, ev: st.get(None).model.tokenize(text))).result()  # noqa: E731
        more = tok(" and then what happened next?")

        def turn(prompt: list[int]) -> tuple[list[int], int]:
            r = e.submit(J.Generate(prompt=prompt, max_tokens=8, ignore_eog=True, draft_depth=2)).result()
            return prompt + r.tokens + more, r.stats.prompt_tokens_reused

        a, _ = turn(tok(PROMPTS[0]))
        b, _ = turn(tok(PROMPTS[1]))
        a2, reused = turn(a)
        assert reused >= len(a) - len(more) - 1, "A's second turn did not find A's slot"
        b2, reused = turn(b)
        assert reused >= len(b) - len(more) - 1, "B's second turn did not find B's slot"
        turn(tok(PROMPTS[2]))  # a new conversation: A's slot was idle longer than B's
        _, reused = turn(b2)
        assert reused >= len(b2) - len(more) - 1
        _, reused = turn(a2)
        assert reused < len(a), "the new conversation should have taken A's slot, idle longest"
