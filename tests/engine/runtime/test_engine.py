"""The engine thread: job queue, event streams, cancellation, errors."""

from __future__ import annotations

import threading

import pytest

from engine.errors import InvalidRequestError, NoModelLoadedError, QueueFullError
from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec, MtpSource


@pytest.fixture(scope="module")
def engine(fixtures):
    eng = Engine().start()
    info = eng.submit(J.LoadModel(LoadSpec(fixtures["full"].path, mtp=MtpSource.INTEGRATED, name="full"))).result(60)
    assert info.mtp == "integrated" and info.name == "full"
    yield eng
    eng.stop()


def _blocker(release: threading.Event, started: threading.Event):
    def fn(state, cancel, emit):
        started.set()
        release.wait(30)
        return "released"

    return J.Call(fn, "blocker")


def test_event_stream_of_a_generation(engine):
    h = engine.submit(J.Generate(prompt="Hello", max_tokens=20, draft_depth=3))
    events = list(h.events(timeout=60))
    assert isinstance(events[0], J.Started) and isinstance(events[-1], J.Done)
    tokens = [t for e in events if isinstance(e, J.Tokens) for t in e.tokens]
    rounds = [e.stats for e in events if isinstance(e, J.Round)]
    result = events[-1].result
    assert tokens == result.tokens and len(tokens) == 20
    assert "".join(e.text for e in events if isinstance(e, J.Tokens)) == result.text
    assert sum(r.emitted for r in rounds) == 19  # the first token comes from the prompt
    assert result.stats.accepted == sum(r.accepted for r in rounds)
    assert result.finish_reason == "length"


def test_callback_mode_delivers_on_the_engine_thread(engine):
    threads, kinds = set(), []

    def on_event(ev):
        threads.add(threading.current_thread().name)
        kinds.append(type(ev).__name__)

    r = engine.submit(J.Generate(prompt="Hi", max_tokens=5), on_event=on_event).result(60)
    assert threads == {"mtp-engine"} and kinds[0] == "Started" and kinds[-1] == "Done"
    assert len(r.tokens) == 5


def test_cancel_while_queued_never_starts(engine):
    release, started = threading.Event(), threading.Event()
    blocker = engine.submit(_blocker(release, started))
    started.wait(10)
    queued = engine.submit(J.Generate(prompt="Hi", max_tokens=5))
    queued.cancel()
    release.set()
    assert blocker.result(30) == "released"
    events = list(queued.events(timeout=30))
    assert [type(e) for e in events] == [J.Done] and events[0].cancelled


def test_cancel_mid_generation_returns_the_partial_result(engine):
    holder = {}

    def hook(phase):
        if phase == "verify" and len(holder.setdefault("seen", [])) == 3:
            holder["handle"].cancel()
        if phase == "verify":
            holder["seen"].append(phase)

    h = engine.submit(J.Generate(prompt="Hello", max_tokens=200, draft_depth=2, phase_hook=hook))
    holder["handle"] = h
    final = list(h.events(timeout=60))[-1]
    assert isinstance(final, J.Done) and final.cancelled
    assert final.result.stop_reason == "cancelled" and final.result.finish_reason == "length"
    assert 0 < len(final.result.tokens) < 200
    # the engine carries on
    assert len(engine.submit(J.Generate(prompt="Hello", max_tokens=3)).result(60).tokens) == 3


def test_errors_are_events_and_the_engine_survives(engine):
    with pytest.raises(NoModelLoadedError, match="'nope' is not loaded"):
        engine.submit(J.Generate(model="nope", prompt="x")).result(30)
    with pytest.raises(InvalidRequestError, match="draft depth"):
        engine.submit(J.Generate(prompt="x", draft_depth=0)).result(30)
    with pytest.raises(InvalidRequestError, match="exceeds"):
        engine.submit(J.Generate(prompt="x", draft_depth=99)).result(30)

    def boom(state, cancel, emit):
        raise RuntimeError("kaput")

    h = engine.submit(J.Call(boom))
    final = list(h.events(timeout=30))[-1]
    assert isinstance(final, J.Failed) and final.code == "internal_error" and "kaput" in final.message
    assert len(engine.submit(J.Generate(prompt="Hi", max_tokens=2)).result(30).tokens) == 2


def test_no_model_loaded():
    with Engine() as eng:
        with pytest.raises(NoModelLoadedError, match="No model is loaded"):
            eng.submit(J.Generate(prompt="x")).result(30)


def test_bounded_queue_rejects_when_full():
    with Engine(EngineConfig(max_queue=2)) as eng:
        release, started = threading.Event(), threading.Event()
        eng.submit(_blocker(release, started))
        started.wait(10)
        a = eng.submit(J.Call(lambda *a: 1))
        b = eng.submit(J.Call(lambda *a: 2))
        with pytest.raises(QueueFullError):
            eng.submit(J.Call(lambda *a: 3))
        assert eng.queue_depth == 3
        release.set()
        assert (a.result(10), b.result(10)) == (1, 2)


def test_stop_cancels_the_running_job(fixtures):
    eng = Engine().start()
    eng.submit(J.LoadModel(LoadSpec(fixtures["full"].path))).result(60)
    started = threading.Event()
    h = eng.submit(J.Generate(prompt="Hi", max_tokens=100000, ignore_eog=True, phase_hook=lambda p: started.set()))
    started.wait(30)
    eng.stop()
    final = list(h.events(timeout=30))[-1]
    assert isinstance(final, J.Done) and final.cancelled
    assert eng.models() == {}


def test_a_running_engine_gets_the_gil_back_soon_after_each_decode():
    """CPython's 5 ms switch interval let a busy event loop hold every stream's next step
    for up to 5 ms; an engine shortens it, and never lengthens a shorter one."""
    import sys

    from engine.runtime.llama import lib

    was = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        with Engine():
            assert sys.getswitchinterval() == pytest.approx(lib.SWITCH_INTERVAL_S)
        sys.setswitchinterval(lib.SWITCH_INTERVAL_S / 2)
        with Engine():
            assert sys.getswitchinterval() == pytest.approx(lib.SWITCH_INTERVAL_S / 2)
    finally:
        sys.setswitchinterval(was)
