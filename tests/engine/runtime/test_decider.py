"""Where a request meets its defaults: layering, checking once, what the engine runs."""

from __future__ import annotations

import dataclasses

import pytest

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.decode.depth import AUTO, DraftDepth, Mtp
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.decider import BUILTIN, resolve


def test_a_value_comes_from_the_first_layer_that_sets_it():
    engine = J.Defaults(max_tokens=100, draft_depth=AUTO, temperature=0.5)
    server = J.Defaults(max_tokens=512)
    job = resolve(J.Generate(prompt="x", top_k=7, defaults=server), engine)
    assert job.max_tokens == 512  # the submitter's layer over the engine's
    assert job.draft_depth == AUTO and job.temperature == 0.5  # the engine's, where the submitter is silent
    assert job.top_k == 7  # the request's own value over every layer
    assert job.top_p == BUILTIN.top_p and job.mtp is Mtp.ON and job.sampled_draft is False  # built-in
    assert job.defaults is None


def test_resolving_is_idempotent_and_parses_each_value_once(monkeypatch):
    from engine.runtime import decider as request_mod

    parses = []
    real = DraftDepth.parse.__func__
    monkeypatch.setattr(request_mod.DraftDepth, "parse", classmethod(lambda cls, v: parses.append(v) or real(cls, v)))
    job = resolve(J.Generate(prompt="x", draft_depth="3", mtp="off", stop="END", seed=-1))
    assert job.draft_depth == DraftDepth(3) and job.mtp is Mtp.OFF and job.stop == ("END",) and job.seed is None
    assert parses == ["3"]  # the request's text, parsed once
    again = resolve(job, J.Defaults(draft_depth=AUTO, max_tokens=9))
    assert again == job  # complete: no layer changes it
    assert parses == ["3"]  # and never again: a resolved job is not parsed a second time


@pytest.mark.parametrize(
    "field,value",
    [
        ("max_tokens", -1),
        ("max_tokens", 0),  # the one lower bound, for every entry point
        ("reasoning_format", "deepseek-legacy"),
        ("parallel_tool_calls", "false"),  # a truthy string is not an on/off value
        ("suffix_drafts", 1),
        ("temperature", 2.5),
        ("top_p", 0.0),
        ("top_k", -3),
        ("seed", 2**64),
        ("stop", ["x"] * 5),
        ("draft_depth", 0),
        ("mtp", "sometimes"),
        ("temperature", float("nan")),
    ],
)
def test_a_bad_value_is_refused_naming_its_field_in_the_same_words_from_any_layer(field, value):
    with pytest.raises(InvalidRequestError) as err:
        resolve(J.Generate(prompt="x", **{field: value}))
    assert err.value.param == field
    # one place: the value set in the submitter's or the engine's defaults instead is
    # refused by the same check, in the same words
    if field in {f.name for f in dataclasses.fields(J.Defaults)}:
        for job, engine_defaults in (
            (J.Generate(prompt="x", defaults=J.Defaults(**{field: value})), None),
            (J.Generate(prompt="x"), J.Defaults(**{field: value})),
        ):
            with pytest.raises(InvalidRequestError) as layered:
                resolve(job, engine_defaults)
            assert (type(layered.value), layered.value.param, str(layered.value)) == (
                type(err.value),
                field,
                str(err.value),
            )


def test_reply_length_is_at_least_one_token_and_says_what_to_do():
    with pytest.raises(InvalidRequestError) as err:
        resolve(J.Generate(prompt="x", max_tokens=0))
    assert str(err.value) == (
        "max_tokens must be at least 1, got 0. It is the most tokens the reply may have; leave it out for the default."
    )
    assert resolve(J.Generate(prompt="x", max_tokens=1)).max_tokens == 1


def test_reasoning_format_and_parallel_calls_are_decided_like_every_value():
    job = resolve(J.Generate(messages=[{"role": "user", "content": "x"}]))
    assert job.reasoning_format == BUILTIN.reasoning_format == "auto"
    assert job.parallel_tool_calls is BUILTIN.parallel_tool_calls is True
    # from any layer, the request's own value first
    engine = J.Defaults(reasoning_format="none", parallel_tool_calls=False)
    by_engine = resolve(J.Generate(prompt="x"), engine)
    assert by_engine.reasoning_format == "none" and by_engine.parallel_tool_calls is False
    submitter = J.Generate(prompt="x", defaults=J.Defaults(reasoning_format="auto"))
    assert resolve(submitter, engine).reasoning_format == "auto"
    assert resolve(J.Generate(prompt="x", parallel_tool_calls=True), engine).parallel_tool_calls is True


def test_deepseek_reasoning_format_is_llama_servers_name_for_auto():
    """llama-server's "deepseek" puts the thinking in reasoning_content, as its "auto"
    does: here it is resolved to "auto", so the job says what it will do."""
    assert resolve(J.Generate(prompt="x", reasoning_format="deepseek")).reasoning_format == "auto"
    assert resolve(J.Generate(prompt="x"), J.Defaults(reasoning_format="deepseek")).reasoning_format == "auto"
    with pytest.raises(InvalidRequestError, match="'auto'.*'none'") as err:
        resolve(J.Generate(prompt="x", reasoning_format="raw"))
    assert err.value.param == "reasoning_format"


def test_an_out_of_range_default_layer_is_refused_too():
    with pytest.raises(InvalidRequestError) as err:
        resolve(J.Generate(prompt="x"), J.Defaults(top_p=3.0))
    assert err.value.param == "top_p"


@pytest.fixture(scope="module")
def auto_engine(fixtures):
    with Engine(EngineConfig(request=J.Defaults(draft_depth=AUTO))) as eng:
        eng.submit(J.LoadModel(LoadSpec(fixtures["full"].path, mtp=MtpSource.INTEGRATED, name="full"))).result(60)
        yield eng


def test_observers_see_the_job_as_it_runs(auto_engine, request):
    seen = []

    def watch(h, ev):
        if isinstance(ev, J.Started):
            seen.append(h.job)

    auto_engine.observe(watch)
    request.addfinalizer(lambda: auto_engine.unobserve(watch))
    r = auto_engine.submit(J.Generate(prompt="Hello", max_tokens=8)).result(60)
    job = seen[-1]
    assert job.draft_depth == AUTO and job.max_tokens == 8 and job.temperature == 0.0
    assert r.stats.draft_depth == AUTO and r.stats.mtp is Mtp.ON


def test_an_observer_that_leaves_sees_no_more_events(auto_engine):
    seen = []

    def watch(h, ev):
        seen.append(ev)

    auto_engine.observe(watch)
    auto_engine.submit(J.Generate(prompt="Hello", max_tokens=4)).result(60)
    n = len(seen)
    assert n > 0
    auto_engine.unobserve(watch)
    auto_engine.submit(J.Generate(prompt="Hello", max_tokens=4)).result(60)
    assert len(seen) == n
    auto_engine.unobserve(watch)  # twice: nothing to do


def test_a_job_that_wants_no_round_events_gets_none_while_observers_do(auto_engine, request):
    observed, got = [], []

    def watch(h, ev):
        observed.append((h.id, ev))

    auto_engine.observe(watch)
    request.addfinalizer(lambda: auto_engine.unobserve(watch))
    h = auto_engine.submit(J.Generate(prompt="Hello", max_tokens=12, draft_depth=2, rounds=False), on_event=got.append)
    r = h.result(60)
    assert r.stats.rounds > 0 and not any(isinstance(ev, J.Round) for ev in got)
    assert any(isinstance(ev, J.Round) for jid, ev in observed if jid == h.id)
    assert "".join(ev.text for ev in got if isinstance(ev, J.Tokens)) == r.text


def test_a_refused_request_starts_and_fails_with_words(auto_engine):
    events = list(auto_engine.submit(J.Generate(prompt="x", temperature=-1)).events(timeout=30))
    assert isinstance(events[0], J.Started) and isinstance(events[-1], J.Failed)
    assert "temperature" in events[-1].message and events[-1].error.param == "temperature"


def test_log_probabilities_come_with_the_stop_reason_and_counts(auto_engine):
    r = auto_engine.submit(J.Generate(prompt="Hello", max_tokens=5, logprobs=2, ignore_eog=True)).result(60)
    assert r.stop_reason == "max_tokens" and r.finish_reason == "length"
    assert [t.token for t in r.logprobs] == r.tokens and all(len(t.top) == 2 for t in r.logprobs)
