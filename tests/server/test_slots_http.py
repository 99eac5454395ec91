"""Several clients of the endpoint at once, decoded together (engine.runtime.slots), over
real HTTP with the official ``openai`` client: each stream equals its reply alone, /metrics
shows every slot, and a client that disconnects frees its slot at once."""

from __future__ import annotations

import threading
import time

import pytest

import httpx2 as httpx
from engine.runtime.engine import EngineConfig
from engine.runtime.load.loader import LoadSpec
from tests.server.serving import serving

PROMPTS = ["Hello there, how are you today?", "The quick brown fox jumps over", "Once upon a time in a land far away"]


@pytest.fixture(scope="module")
def served(fixtures):
    spec = LoadSpec(fixtures["partial"].path, n_ctx=512, probe=False, fit="off", parallel=2, name="tiny")
    with serving([spec], defaults=EngineConfig(prompt_cache_mb=0)) as served:
        yield served


def _values(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}


def test_concurrent_streams_equal_their_replies_alone_and_metrics_show_the_slots(served):
    from openai import OpenAI

    srv, _ = served
    with OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0) as client:

        def ask(prompt: str) -> str:
            stream = client.completions.create(
                model="tiny",
                prompt=prompt,
                max_tokens=40,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True, "draft_depth": "auto"},
            )
            return "".join(c.choices[0].text for c in stream if c.choices)

        alone = [ask(p) for p in PROMPTS]
        together: list[str | None] = [None] * len(PROMPTS)
        threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, ask(PROMPTS[i]))) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert together == alone and all(alone)
    v = _values(srv.url)
    assert v["mtp_slots"] == 2
    assert (
        v['mtp_slot_requests_total{model="tiny",slot="0"}'] + v['mtp_slot_requests_total{model="tiny",slot="1"}'] == 6
    )
    assert v['mtp_slot_requests_total{model="tiny",slot="1"}'] >= 1  # the second slot took part
    assert v["mtp_slots_busy"] == 0
    # MTP auto chose the depth of the steps the two slots shared (one policy for steps of two)
    assert 0 <= v['mtp_step_draft_depth{model="tiny",sequences="2"}'] <= 8


def test_a_client_that_disconnects_frees_its_slot(served):
    srv, eng = served
    body = {"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 400, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", srv.url + "/v1/completions", json=body) as r:
            for n, _ in enumerate(r.iter_lines()):
                if n >= 3:
                    break  # leave mid-stream
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if all(not s.busy for s in eng.slots()["tiny"]):
            break
        time.sleep(0.05)
    assert all(not s.busy for s in eng.slots()["tiny"])
    assert _values(srv.url)["mtp_slots_busy"] == 0


def test_count_tokens_answers_while_streams_run(served):
    """Claude Code sends /v1/messages/count_tokens constantly, beside its running streams:
    the count is answered between their steps (with the official ``anthropic`` client),
    while both streams are still running."""
    from anthropic import Anthropic
    from openai import OpenAI

    srv, _ = served
    first_text = [threading.Event(), threading.Event()]
    ended: list[float] = []

    def stream(i: int) -> None:
        with OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0) as client:
            chunks = client.completions.create(
                model="tiny",
                prompt=PROMPTS[i],
                max_tokens=440,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            for c in chunks:
                if c.choices and c.choices[0].text:
                    first_text[i].set()
        ended.append(time.perf_counter())

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        assert all(ev.wait(60) for ev in first_text)
        client = Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
        n = client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": "How long is this?"}])
        counted = time.perf_counter()
        assert n.input_tokens > 5
        assert not ended, "the count waited for the streams to end"
    finally:
        for t in threads:
            t.join(120)
    assert len(ended) == 2 and min(ended) > counted
