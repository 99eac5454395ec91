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
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.engine import Engine, EngineDefaults
from engine.runtime.load.loader import LoadSpec

PROMPTS = [
    "Hello there, how are you today?",
    "The quick brown fox jumps over",
    "Once upon a time in a land far away",
    "Numbers: one two three four five",
    "A list of colours: red, green,",
    "Dear friend, I write to you",
]

#: what each of several concurrent requests asks for: MTP auto, off, a fixed depth,
#: seeded sampling, penalties and a grammar
ASKS = [
    dict(draft_depth="auto"),
    dict(mtp=J.Mtp.OFF),
    dict(draft_depth=2),
    dict(temperature=0.9, top_k=40, seed=7, draft_depth=2),
    dict(repeat_penalty=1.3, frequency_penalty=0.4, draft_depth="auto"),
    dict(grammar=None, draft_depth=3),
]


@pytest.fixture(scope="module")
def attention_only(tmp_path_factory) -> Path:
    """glm4moe: attention-only, its MTP layer inside (written in a child process)."""
    out = tmp_path_factory.mktemp("slotfam")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "engine.synth.families", str(out), "glm4moe"],
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


def _engine(path: Path, parallel: int, **defaults) -> Engine:
    e = Engine(EngineDefaults(**defaults)).start()
    e.submit(J.LoadModel(LoadSpec(path, n_ctx=512, probe=False, fit="off", parallel=parallel))).result()
    return e


def _job(i: int, max_tokens: int = 32, **kw) -> J.Generate:
    ask = dict(ASKS[i % len(ASKS)])
    if "grammar" in ask:  # the output must follow a grammar (its forced tokens ride along)
        ask["grammar"] = GrammarSpec("regex", r"(the |a |an )?[a-z]{2,12}( [a-z]{2,12}){2,30}")
    return J.Generate(prompt=PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens, ignore_eog=True, **{**ask, **kw})


def _alone(path: Path, jobs: list[J.Generate]) -> list[list[int]]:
    with _engine(path, 1) as e:
        return [e.submit(j).result().tokens for j in jobs]


@pytest.mark.parametrize("parallel", [1, 2, 4])
def test_each_sequence_equals_its_output_alone(model_path, parallel):
    jobs = [_job(i) for i in range(max(parallel, 2) + 2)]  # more requests than slots: some wait
    want = _alone(model_path, jobs)
    with _engine(model_path, parallel) as e:
        handles = [e.submit(j) for j in jobs]
        got = [h.result() for h in handles]
        slots = e.slots()
    assert [g.tokens for g in got] == want
    assert all(len(t) == 32 for t in want)
    if parallel > 1:
        (info,) = slots.values()
        assert len(info) == parallel and sum(s["requests"] for s in info) == len(jobs)
        assert all(s["state"] == "idle" for s in info)
    drafted = [g.stats.drafted for g, j in zip(got, jobs) if j.mtp != J.Mtp.OFF]
    assert sum(drafted) > 0


def test_join_and_leave_mid_stream(fixtures):
    path = fixtures["partial"].path
    long, short = _job(0, max_tokens=96), _job(2, max_tokens=12)
    want = _alone(path, [long, short])
    with _engine(path, 2) as e:
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
    keep, drop = _job(0, max_tokens=64), _job(1, max_tokens=200)
    want = _alone(path, [keep])[0]
    with _engine(path, 2) as e:
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
    busy = _job(0, max_tokens=160)
    want = _alone(path, [first, second])
    with _engine(path, 2) as e:
        b = e.submit(busy)
        r1 = e.submit(first).result()
        r2 = e.submit(second).result()  # its prefix comes from the cache, into whichever slot is free
        b.result()
        info = e.prompt_cache_info()
    assert [r1.tokens, r2.tokens] == want
    # the system prompt's snapshot (a message boundary) is restored for the second
    assert info["hits"] >= 1 and r2.stats.prompt_tokens_restored > 0


def test_a_full_queue_refuses_work_while_every_slot_is_busy(fixtures):
    path = fixtures["partial"].path
    e = Engine(EngineDefaults(max_queue=2)).start()
    try:
        e.submit(J.LoadModel(LoadSpec(path, n_ctx=512, probe=False, fit="off", parallel=2))).result()
        handles, refused = [], None
        for i in range(12):
            try:
                handles.append(e.submit(_job(i, max_tokens=200)))
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
    with _engine(path, 1) as e:
        start = "Once upon a time there was a small village"
        earlier = e.submit(J.Generate(prompt=start, max_tokens=120, ignore_eog=True, mtp=J.Mtp.OFF)).result().text
    copy = start + earlier + start
    jobs = [
        J.Generate(prompt=copy, max_tokens=64, ignore_eog=True, draft_depth="auto"),
        J.Generate(prompt=copy, max_tokens=64, ignore_eog=True, mtp=J.Mtp.OFF),
        _job(2, max_tokens=48),
        _job(3, max_tokens=48),
    ]
    want = _alone(path, jobs)
    with _engine(path, 4) as e:
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
    from engine.runtime.request import depth_policy

    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    path = fixtures["full"].path
    jobs = [J.Generate(prompt=PROMPTS[i], max_tokens=96, ignore_eog=True, draft_depth="auto") for i in range(4)]
    want = _alone(path, jobs)
    with _engine(path, 4) as e:
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
    with _engine(path, 4) as e:  # a restart goes on from what the batch sizes learned
        back = e.submit(J.Call(lambda st, c, ev: depth_policy(st.get(None), AUTO))).result()
    assert sorted(back.batch) == sorted(int(n) for n in saved["batch"])
    assert back.batch[4].acc == pytest.approx(saved["batch"]["4"]["acc"])  # (the save after the last round to end)


def test_each_conversation_comes_back_to_the_slot_that_holds_it(model_path):
    """Turns of two conversations sent one after the other each go to the slot holding the
    conversation, whose context the prefill reuses (no prompt cache: only the slot itself
    holds it); a new conversation takes the slot idle longest, so the most recent stays."""
    with _engine(model_path, 2, prompt_cache_mb=0) as e:
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


def test_a_request_preparing_its_prompt_does_not_stall_the_running_stream(fixtures, monkeypatch):
    """A request is rendered and tokenized on its own thread before it takes a slot (an
    agent's long request takes a step's time or more): the running stream keeps emitting
    meanwhile, and the request then runs as usual."""
    import time

    import engine.runtime.generatejob as generatejob

    preparing = threading.Event()
    went_on: list[bool] = []
    prepare = generatejob.prepare

    def slow_prepare(job, lm, texts):
        if job.prompt == PROMPTS[1]:  # the joining request's: it takes as long as the stream needs for 20 tokens
            preparing.set()
            seen = len(emitted)
            deadline = time.monotonic() + 30  # were preparing on the stepping thread, no token would come
            while len(emitted) < seen + 20 and time.monotonic() < deadline:
                time.sleep(0.001)
            went_on.append(len(emitted) >= seen + 20)
        return prepare(job, lm, texts)

    monkeypatch.setattr(generatejob, "prepare", slow_prepare)
    emitted: list[float] = []
    running = J.Generate(prompt=PROMPTS[0], max_tokens=400, ignore_eog=True, draft_depth=2)
    with _engine(fixtures["partial"].path, 2) as e:
        first = e.submit(running, on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(time.perf_counter()))
        while not emitted:
            time.sleep(0.001)
        joining = e.submit(J.Generate(prompt=PROMPTS[1], max_tokens=8, ignore_eog=True))
        assert preparing.wait(10)
        assert len(joining.result().tokens) == 8
        assert len(first.result().tokens) == 400
    assert went_on == [True], "the running stream stopped while the other request prepared"


def test_a_request_that_fails_before_it_takes_a_slot_gives_its_place_back(fixtures, monkeypatch):
    """A request whose preparation fails (a bad value found while rendering) has held a
    place among the slots but no slot: it fails in words and every slot is free after it,
    for a request that follows and for one that was running meanwhile."""
    import engine.runtime.generatejob as generatejob
    from engine.errors import InvalidRequestError

    prepare = generatejob.prepare

    def failing(job, lm, texts):
        if job.prompt == PROMPTS[1]:
            raise InvalidRequestError("bad value", param="prompt")
        return prepare(job, lm, texts)

    monkeypatch.setattr(generatejob, "prepare", failing)
    with _engine(fixtures["partial"].path, 2) as e:
        running = e.submit(_job(0, max_tokens=64))
        with pytest.raises(InvalidRequestError):
            e.submit(J.Generate(prompt=PROMPTS[1], max_tokens=8)).result()
        assert len(running.result().tokens) == 64
        assert len(e.submit(_job(2, max_tokens=8)).result().tokens) == 8
        busy = e.submit(J.Call(lambda st, c, ev: st.get(None).slots.busy)).result(60)  # waits for every slot to be free
    assert busy == 0


@pytest.mark.parametrize("parallel", [1, 2], ids=["one-slot", "two-slots"])
def test_a_count_is_answered_between_the_steps_of_running_streams(fixtures, parallel):
    """Counting a prompt's tokens (Claude Code's count_tokens, sent constantly) only reads
    the model: it runs between the running streams' steps instead of waiting for them all
    to end, and the streams go on untouched; a call that needs the models to itself still
    waits for them. A model loaded with one slot decodes through the same steps (one decode
    path), so its one stream does not hold the count back either."""
    from engine.runtime.generatejob import count_prompt

    with _engine(fixtures["partial"].path, parallel) as e:
        streams = [e.submit(_job(i, max_tokens=440)) for i in range(parallel)]
        for h in streams:  # both are decoding
            next(ev for ev in h.events(30) if isinstance(ev, J.Tokens))
        ask = e.resolve(J.Generate(messages=[{"role": "user", "content": "How many tokens is this?"}]))
        n = e.submit(J.Call(lambda st, c, emit: count_prompt(ask, st, c, emit), access="read")).result(30)
        running = [not h.done.is_set() for h in streams]
        assert n > 5 and all(running), f"the count came back after the streams: {running}"
        exclusive = e.submit(J.Call(lambda st, c, emit: [h.done.is_set() for h in streams])).result(60)
        assert exclusive == [True] * parallel
        assert [len(h.result().tokens) for h in streams] == [440] * parallel
    with pytest.raises(ValueError, match="access must be one of exclusive, read"):
        J.Call(lambda *_: None, access="write")


def test_a_model_loads_beside_running_streams_and_an_unload_waits_only_for_its_own(fixtures, tmp_path):
    """A load is built off the stepping path: the running stream keeps emitting while the
    new model is checked in a child and loaded, and it is handed over while the stream still
    runs. Unloading it waits for its own streams only."""
    import shutil
    import time

    other = tmp_path / "other.gguf"
    shutil.copyfile(fixtures["full"].path, other)  # a file never seen: its load probe runs in a child
    emitted: list[float] = []
    with Engine().start() as e:
        e.submit(
            J.LoadModel(
                LoadSpec(fixtures["partial"].path, n_ctx=4096, probe=False, fit="off", parallel=2, name="partial")
            )
        ).result()
        stream = e.submit(
            _job(0, max_tokens=4000),
            on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(time.perf_counter()),
        )
        while not emitted:
            time.sleep(0.001)
        t0 = time.perf_counter()
        info = e.submit(J.LoadModel(LoadSpec(other, n_ctx=256, parallel=2, name="other"), replace=False)).result(120)
        t1 = time.perf_counter()
        still = not stream.done.is_set()
        assert info["name"] == "other" and set(e.models()) == {"partial", "other"}
        during = [t for t in emitted if t0 < t < t1]
        assert still and len(during) >= 10, (
            f"the stream emitted {len(during)} times in a {t1 - t0:.2f} s load; running after: {still}"
        )
        beside = e.submit(_job(1, max_tokens=8, model="other"))
        assert len(beside.result(60).tokens) == 8
        e.submit(J.UnloadModel("other")).result(60)
        assert set(e.models()) == {"partial"} and not stream.done.is_set()
        stream.cancel()
        assert stream.result(60).tokens


def test_a_bench_on_one_model_runs_beside_the_streams_of_another(fixtures):
    """The A/B bench needs its model to itself, not the engine: it runs once that model's
    own stream has ended, as one of its sequences, while another model's stream goes on;
    and its figures are the bench's as ever."""
    import time

    from engine.runtime.measure.bench import bench_job

    emitted: list[float] = []
    with Engine().start() as e:
        for name, fx in (("a", "partial"), ("b", "full")):
            e.submit(
                J.LoadModel(
                    LoadSpec(fixtures[fx].path, n_ctx=4096, probe=False, fit="off", parallel=2, name=name),
                    replace=False,
                )
            ).result()
        own = e.submit(_job(1, max_tokens=24, model="b"))  # b's own stream: the bench waits for it, never ends it
        stream = e.submit(
            _job(0, max_tokens=4000, model="a"),
            on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(time.perf_counter()),
        )
        while not emitted:
            time.sleep(0.001)
        t0 = time.perf_counter()
        fn = bench_job(["0", "2"], ["Hello there."], 32, 1, model="b")
        result = e.submit(J.Call(fn, "bench", model="b")).result(120)
        t1 = time.perf_counter()
        mine = own.result(5)
        assert len(mine.tokens) == 24 and mine.finish_reason == "length"  # ended by itself, before the bench
        assert not stream.done.is_set(), "the other model's stream had to end for the bench"
        during = [t for t in emitted if t0 < t < t1]
        assert len(during) >= 10, f"the other model's stream emitted {len(during)} times during a {t1 - t0:.2f} s bench"
        assert result.model == "b" and [a.depth for a in result.arms] == ["0", "2"] and result.identical
        assert all(a.tokens_per_second for a in result.arms)
        stream.cancel()
        assert stream.result(60).tokens


def test_requests_for_loaded_models_start_while_another_model_loads(fixtures, tmp_path):
    """A load holds only the model it loads: a request for a loaded model with a free slot,
    and a count, start and end while it loads; a request for the loading model waits for
    it, and what is queued behind that request waits too (the queue's order holds)."""
    import shutil
    import time

    other = tmp_path / "late.gguf"
    shutil.copyfile(fixtures["full"].path, other)  # never probed: its load takes a child process
    ends: dict[str, float] = {}
    with Engine().start() as e:
        e.submit(
            J.LoadModel(LoadSpec(fixtures["partial"].path, n_ctx=1024, probe=False, fit="off", parallel=2, name="a"))
        ).result()

        def note(key):
            return lambda ev: isinstance(ev, (J.Done, J.Failed)) and ends.setdefault(key, time.perf_counter())

        load = e.submit(
            J.LoadModel(LoadSpec(other, n_ctx=256, parallel=2, name="late"), replace=False), on_event=note("load")
        )
        first = e.submit(_job(0, max_tokens=8, model="a"), on_event=note("a"))
        count = e.submit(J.Call(lambda st, c, emit: len(st.models), access="read"), on_event=note("count"))
        assert len(first.result(60).tokens) == 8 and count.result(60) == 1
        load.result(120)
        assert ends["a"] < ends["load"] and ends["count"] < ends["load"], ends
        # a request for the model being loaded waits for it; one behind it waits its turn
        other2 = tmp_path / "late2.gguf"
        shutil.copyfile(fixtures["full"].path, other2)
        load2 = e.submit(
            J.LoadModel(LoadSpec(other2, n_ctx=256, parallel=2, name="late2"), replace=False), on_event=note("load2")
        )
        on_new = e.submit(_job(1, max_tokens=4, model="late2"), on_event=note("late2"))
        behind = e.submit(_job(0, max_tokens=4, model="a"), on_event=note("behind"))
        load2.result(120)
        assert len(on_new.result(60).tokens) == 4 and len(behind.result(60).tokens) == 4
        assert ends["load2"] < ends["late2"] and ends["load2"] < ends["behind"], ends


def test_stopping_the_engine_while_a_load_runs_beside_a_stream_ends_it(fixtures, tmp_path):
    """stop() during a load (its probe's child running) ends the engine thread: its end
    marker is never taken for a job to start beside the load."""
    import shutil
    import time

    other = tmp_path / "slow.gguf"
    shutil.copyfile(fixtures["full"].path, other)  # never probed: the load takes a while
    e = Engine().start()
    e.submit(
        J.LoadModel(LoadSpec(fixtures["partial"].path, n_ctx=1024, probe=False, fit="off", parallel=2, name="a"))
    ).result()
    emitted: list[float] = []
    e.submit(_job(0, max_tokens=2000, model="a"), on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(1))
    while not emitted:
        time.sleep(0.001)
    e.submit(J.LoadModel(LoadSpec(other, n_ctx=256, parallel=2, name="slow"), replace=False))
    time.sleep(0.05)  # the load under way
    thread = e._thread
    e.stop(timeout=20)
    assert thread is not None and not thread.is_alive()
