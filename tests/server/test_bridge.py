"""The endpoint's view of an engine job (engine/server/bridge.py): every event arrives, in
order, with one wake-up of the event loop per pause while tokens stream, not one per token;
the first tokens and the end are never held back; what gathered comes as one event."""

from __future__ import annotations

import asyncio
import time

from engine.runtime import jobs as J
from engine.runtime.decode.logprobs import TokenLogprob
from engine.runtime.engine import Engine
from engine.runtime.prompt.reply import CALL_ARGS, CALL_START, CONTENT, Part, joined_parts
from engine.server import bridge


def _stream_job(n: int, gap_s: float) -> J.Call:
    def fn(state, cancel, emit):
        for i in range(n):
            emit(J.Tokens((i,), f"t{i}"))
            time.sleep(gap_s)
        return n

    return J.Call(fn)


def _counting(stream: bridge.JobStream, method: str) -> list[int]:
    """Count the calls of one of ``stream``'s methods (the loop calls it by attribute)."""
    calls = [0]
    inner = getattr(stream, method)

    def counted():
        calls[0] += 1
        inner()

    setattr(stream, method, counted)
    return calls


def test_a_stream_wakes_the_loop_once_per_pause_and_loses_nothing():
    n, gap = 200, 0.0005  # ~2,000 tokens/s, the demo's pace

    async def run():
        with Engine() as engine:
            stream = bridge.JobStream(engine, _stream_job(n, gap))
            wakes = _counting(stream, "_wake")
            got, first_at = [], None
            t0 = time.perf_counter()
            async for ev in stream:
                if isinstance(ev, J.Tokens):
                    first_at = first_at or time.perf_counter() - t0
                    got.extend(ev.tokens)
            return got, wakes[0], first_at, stream.final

    got, wakes, first_at, final = asyncio.run(run())
    assert got == list(range(n)) and isinstance(final, J.Done) and final.result == n
    # one wake-up per token would be ~200; paced, about the stream's time over the pause
    assert wakes <= 0.4 * n, wakes
    assert first_at is not None and first_at < 0.5  # the first token is not held for a pause


def test_a_stream_slower_than_the_pause_costs_one_wake_up_per_event():
    """A big model's stream (a token every 10 ms) gathers nothing in a pause: it starts none,
    so the loop is not woken a second time per token for a pause's empty end."""
    n = 12

    async def run():
        with Engine() as engine:
            stream = bridge.JobStream(engine, _stream_job(n, 3 * bridge.PACE_S))
            wakes, paused = _counting(stream, "_wake"), _counting(stream, "_paused")
            got = [t async for ev in stream if isinstance(ev, J.Tokens) for t in ev.tokens]
            return got, wakes[0], paused[0]

    got, wakes, paused = asyncio.run(run())
    assert got == list(range(n))
    assert wakes >= n and paused <= 1, (wakes, paused)


def test_the_end_of_a_stream_is_not_held_for_a_pause(monkeypatch):
    monkeypatch.setattr(bridge, "PACE_S", 5.0)  # a pause far longer than the job

    async def run():
        with Engine() as engine:
            t0 = time.perf_counter()
            stream = bridge.JobStream(engine, _stream_job(5, 0.0))
            events = [ev async for ev in stream]
            return events, time.perf_counter() - t0

    events, took = asyncio.run(run())
    assert [t for ev in events if isinstance(ev, J.Tokens) for t in ev.tokens] == list(range(5))
    assert isinstance(events[-1], J.Done) and took < 2.0


def test_a_stream_nobody_reads_any_more_stops_waking_the_loop():
    """A reader that goes away mid-stream (a handler cancelled or failed before the stream
    ended) leaves events in the buffer: the pauses stop instead of waking the loop for them
    every few milliseconds."""

    async def run():
        with Engine() as engine:
            stream = bridge.JobStream(engine, _stream_job(40, 0.001))
            paused = _counting(stream, "_paused")
            async for ev in stream:  # read the first tokens, then stop reading
                if isinstance(ev, J.Tokens):
                    break
            while not stream.handle.done.is_set():
                await asyncio.sleep(0.01)
            before = paused[0]
            await asyncio.sleep(0.2)  # 50 pauses' worth, were the chain still going
            return paused[0] - before, len(stream._events)

    after, left = asyncio.run(run())
    assert left > 0  # the unread events are still there ...
    assert after <= 1  # ... and the loop is left alone


def test_what_gathered_comes_as_one_event_and_a_slow_stream_comes_as_written():
    """A reader that is behind gets the Tokens events that gathered as one (one chunk on the
    wire): their tokens, text and parts one after another. A stream slower than the pause
    arrives event by event, as it is written."""

    def job(state, cancel, emit):
        emit(J.Tokens((0,), "a", None, (Part(CONTENT, "a"),)))
        for i in range(1, 21):
            emit(J.Tokens((i,), f"<{i}>", None, (Part(CALL_ARGS, f"<{i}>", index=0),)))
        return 21

    async def behind():
        with Engine() as engine:
            stream = bridge.JobStream(engine, J.Call(job))
            while not stream.handle.done.is_set():  # the reader is busy elsewhere meanwhile
                await asyncio.sleep(0.01)
            return [ev async for ev in stream]

    events = asyncio.run(behind())
    tokens = [ev for ev in events if isinstance(ev, J.Tokens)]
    assert len(tokens) == 1 and isinstance(events[-1], J.Done)
    (one,) = tokens
    assert one.tokens == tuple(range(21)) and one.text == "a" + "".join(f"<{i}>" for i in range(1, 21))
    assert one.parts == (Part(CONTENT, "a"), Part(CALL_ARGS, "".join(f"<{i}>" for i in range(1, 21)), index=0))

    async def keeping_up():
        with Engine() as engine:
            stream = bridge.JobStream(engine, _stream_job(5, 10 * bridge.PACE_S))
            return [ev.tokens for ev in [ev async for ev in stream] if isinstance(ev, J.Tokens)]

    assert asyncio.run(keeping_up()) == [(i,) for i in range(5)]


def test_events_that_cannot_be_one_stay_apart():
    lp = TokenLogprob(1, b"a", -0.5)
    with_lp, without = J.Tokens((1,), "a", (lp,)), J.Tokens((2,), "b")
    assert with_lp.then(without) is None and without.then(with_lp) is None
    assert with_lp.then(with_lp) == J.Tokens((1, 1), "aa", (lp, lp))
    assert J.Tokens((1,), "a", None, ()).then(without) is None  # split and not split
    # a call's arguments join only within the same call; a new call's start stays its own part
    a = (Part(CALL_ARGS, "{", index=0),)
    b = (Part(CALL_ARGS, "}", index=1),)
    assert joined_parts(a, b) == a + b
    assert joined_parts(a, (Part(CALL_ARGS, "}", index=0),)) == (Part(CALL_ARGS, "{}", index=0),)
    start = (Part(CALL_START, index=1),)
    assert joined_parts(a, start) == a + start


def test_the_first_text_is_not_held_behind_tokens_without_any(monkeypatch):
    """A reply whose first token shows nothing (a special token, the first bytes of a
    character) still has its first text go out at once: the pauses start with text."""
    monkeypatch.setattr(bridge, "PACE_S", 5.0)

    def job(state, cancel, emit):
        emit(J.Tokens((2,), ""))
        time.sleep(0.05)
        emit(J.Tokens((3,), "hello"))
        time.sleep(1.0)
        return 2

    async def run():
        with Engine() as engine:
            t0 = time.perf_counter()
            stream = bridge.JobStream(engine, J.Call(job))
            async for ev in stream:
                if isinstance(ev, J.Tokens) and ev.text:
                    return time.perf_counter() - t0

    assert asyncio.run(run()) < 0.5


def test_a_long_backlog_comes_in_chunks_of_at_most_join_max(monkeypatch):
    monkeypatch.setattr(bridge, "JOIN_MAX", 8)

    async def behind():
        with Engine() as engine:
            stream = bridge.JobStream(engine, _stream_job(21, 0.0))
            while not stream.handle.done.is_set():
                await asyncio.sleep(0.01)
            return [ev.tokens for ev in [ev async for ev in stream] if isinstance(ev, J.Tokens)]

    got = asyncio.run(behind())
    assert [len(t) for t in got] == [8, 8, 5] and [x for t in got for x in t] == list(range(21))
