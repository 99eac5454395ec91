"""Other work beside running streams (engine.runtime.engine, engine.runtime.admission): a
request preparing its prompt, a count, a load, an unload, a bench and another model's requests
go on while the streams step, and the streams go on untouched; through the real engine on the
hybrid fixture."""

from __future__ import annotations

import threading

import pytest

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.engine import Engine
from engine.runtime.load.loader import LoadSpec
from tests.engine.runtime.slothelpers import PROMPTS, engine_with, job


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
    with engine_with(fixtures["partial"].path, 2) as e:
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

    prepare = generatejob.prepare

    def failing(job, lm, texts):
        if job.prompt == PROMPTS[1]:
            raise InvalidRequestError("bad value", param="prompt")
        return prepare(job, lm, texts)

    monkeypatch.setattr(generatejob, "prepare", failing)
    with engine_with(fixtures["partial"].path, 2) as e:
        running = e.submit(job(0, max_tokens=64))
        with pytest.raises(InvalidRequestError):
            e.submit(J.Generate(prompt=PROMPTS[1], max_tokens=8)).result()
        assert len(running.result().tokens) == 64
        assert len(e.submit(job(2, max_tokens=8)).result().tokens) == 8
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

    with engine_with(fixtures["partial"].path, parallel) as e:
        streams = [e.submit(job(i, max_tokens=440)) for i in range(parallel)]
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


def test_a_request_that_comes_while_a_stream_runs_alone_starts_at_the_streams_next_decode(fixtures):
    """A stream alone runs its own steps, giving the thread back to the engine only now and
    then (YIELD_S): a request queued meanwhile is taken at the stream's next decode, not when
    the stream next gives the thread back (its first token came up to 5 ms late)."""
    import time

    emitted: list[float] = []
    with engine_with(fixtures["partial"].path, 2) as e:
        batcher = e.submit(J.Call(lambda st, *_: next(iter(st.models.values())).slots.batcher)).result(30)
        batcher.yield_s = 3600.0  # the stream would keep the thread to itself to its end
        alone = e.submit(
            job(0, max_tokens=4000),
            on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(time.perf_counter()),
        )
        while not emitted:
            time.sleep(0.001)
        second = e.submit(job(1, max_tokens=4))
        assert len(second.result(60).tokens) == 4
        assert not alone.done.is_set(), "the queued request waited for the stream to end"
        alone.cancel()
        alone.result(60)


def test_prompts_that_come_together_are_decoded_in_one_decode(fixtures, monkeypatch):
    """A new sequence's prompt waits a moment (GATHER_S) for a request being prepared beside
    it, so two clients that start together share one prompt decode instead of the second
    waiting for the first's."""
    import time

    import engine.runtime.generatejob as generatejob
    from engine.runtime.slots import batcher as batcher_mod

    monkeypatch.setattr(batcher_mod, "GATHER_S", 5.0, raising=False)  # however slow this machine
    prepare = generatejob.prepare

    def slow_second(job, lm, texts):
        if job.prompt == PROMPTS[1]:
            time.sleep(0.05)  # the second request's prompt is still being rendered
        return prepare(job, lm, texts)

    monkeypatch.setattr(generatejob, "prepare", slow_second)
    with engine_with(fixtures["partial"].path, 2) as e:
        lm = e.submit(J.Call(lambda st, *_: next(iter(st.models.values())))).result(30)
        lengths = [len(lm.model.prompt_tokens(p)) for p in PROMPTS[:2]]
        lm.slots.batcher.target_decodes.clear()
        handles = [e.submit(J.Generate(prompt=p, max_tokens=4, ignore_eog=True)) for p in PROMPTS[:2]]
        assert [len(h.result(60).tokens) for h in handles] == [4, 4]
        rows = [n for n, _ in lm.slots.batcher.target_decodes]
    # the first decode holds rows of both prompts (each prompt's last token may follow in a
    # decode of its own: a prompt-cache point)
    assert rows[0] > max(lengths) and sum(rows[:2]) == sum(lengths), (rows, lengths)


def test_a_model_loads_beside_running_streams_and_an_unload_waits_only_for_its_own(fixtures, tmp_path):
    """A load is built off the stepping path: the running stream keeps emitting while the
    new model is checked in a child and loaded, and it is handed over while the stream still
    runs. Unloading it waits for its own streams only."""
    import shutil
    import time
    from dataclasses import replace

    from tests.models import RECIPES, build_fixture

    other = tmp_path / "other.gguf"
    shutil.copyfile(fixtures["full"].path, other)  # a file never seen: its load probe runs in a child
    # a stream that outlasts any load on a slow machine: a context of 32k (4k streamed in ~2.5 s,
    # as long as the load itself took in some runs); it is cancelled at the end
    long = build_fixture("long", tmp_path, replace(RECIPES["partial"], n_ctx_train=1 << 15)).path
    emitted: list[float] = []
    with Engine().start() as e:
        e.submit(
            J.LoadModel(LoadSpec(long, n_ctx=1 << 15, probe=False, fit="off", parallel=2, name="partial"))
        ).result()
        stream = e.submit(
            job(0, max_tokens=30_000),
            on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(time.perf_counter()),
        )
        while not emitted:
            time.sleep(0.001)
        t0 = time.perf_counter()
        info = e.submit(J.LoadModel(LoadSpec(other, n_ctx=256, parallel=2, name="other"), replace=False)).result(120)
        t1 = time.perf_counter()
        still = not stream.done.is_set()
        assert info.name == "other" and set(e.models()) == {"partial", "other"}
        during = [t for t in emitted if t0 < t < t1]
        assert still and len(during) >= 10, (
            f"the stream emitted {len(during)} times in a {t1 - t0:.2f} s load; running after: {still}"
        )
        beside = e.submit(job(1, max_tokens=8, model="other"))
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
        own = e.submit(job(1, max_tokens=24, model="b"))  # b's own stream: the bench waits for it, never ends it
        stream = e.submit(
            job(0, max_tokens=4000, model="a"),
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
        first = e.submit(job(0, max_tokens=8, model="a"), on_event=note("a"))
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
        on_new = e.submit(job(1, max_tokens=4, model="late2"), on_event=note("late2"))
        behind = e.submit(job(0, max_tokens=4, model="a"), on_event=note("behind"))
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
    e.submit(job(0, max_tokens=2000, model="a"), on_event=lambda ev: isinstance(ev, J.Tokens) and emitted.append(1))
    while not emitted:
        time.sleep(0.001)
    e.submit(J.LoadModel(LoadSpec(other, n_ctx=256, parallel=2, name="slow"), replace=False))
    time.sleep(0.05)  # the load under way
    thread = e._thread
    e.stop(timeout=20)
    assert thread is not None and not thread.is_alive()
