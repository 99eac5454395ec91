"""Endpoint behaviour below the client: limits, auth, CORS, errors, disconnects, metrics."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx2 as httpx
import pytest

from engine.runtime import jobs as J
from engine.runtime.decode.stopping import StopReason
from engine.server.settings import ServerSettings
from tests.server.conftest import MODEL

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}


def test_bad_json_and_bodies(server):
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 0})
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_over_long_prompt_is_a_400_with_both_numbers(server):
    r = httpx.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": "word " * 700, "max_tokens": 4})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "context_length_exceeded"
    assert re.search(r"The prompt is \d{4} tokens but the context holds 512", err["message"])


def test_body_size_limit(make_server):
    srv = make_server(max_body_bytes=1000)
    r = httpx.post(srv.url + "/v1/completions", json={"model": MODEL, "prompt": "x" * 2000})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_api_key(make_server):
    srv = make_server(api_key="s3cret")
    assert httpx.post(srv.url + "/v1/chat/completions", json=CHAT).status_code == 401
    r = httpx.post(srv.url + "/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    ok = httpx.post(srv.url + "/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert httpx.get(srv.url + "/health").status_code == 200  # health stays public


def test_api_key_is_never_logged(engine, caplog):
    from engine.server.runner import ServerThread

    entries = []
    srv = ServerThread(engine, ServerSettings(port=0, api_key="top-secret-key"), on_request=entries.append).start()
    srv.wait_ready()
    try:
        with caplog.at_level("DEBUG"):
            httpx.post(srv.url + "/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer top-secret-key"})
            httpx.get(srv.url + "/v1/models", headers={"Authorization": "Bearer nope-key"})
    finally:
        srv.stop()
    assert [(e.method, e.path, e.status) for e in entries] == [
        ("POST", "/v1/chat/completions", 200),
        ("GET", "/v1/models", 401),
    ]
    assert "top-secret-key" not in caplog.text + repr(entries) and "nope-key" not in caplog.text + repr(entries)


def test_binding_elsewhere_requires_a_key():
    with pytest.raises(ValueError, match="API key"):
        ServerSettings(host="0.0.0.0").check()
    ServerSettings(host="0.0.0.0", api_key="k").check()
    with pytest.raises(ValueError, match="explicit"):
        ServerSettings(cors_origins=("*",)).check()


PREFLIGHT = {
    "Origin": "http://localhost:3000",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type",
}


def test_cors_off_refuses_preflight(server):
    r = httpx.options(server.url + "/v1/chat/completions", headers=PREFLIGHT)
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers={"Origin": "http://localhost:3000"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_allowlist(make_server):
    srv = make_server(cors_origins=("http://localhost:3000",))
    r = httpx.options(srv.url + "/v1/chat/completions", headers=PREFLIGHT)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "access-control-allow-credentials" not in r.headers
    r = httpx.options(srv.url + "/v1/chat/completions", headers={**PREFLIGHT, "Origin": "http://evil.example"})
    assert r.headers.get("access-control-allow-origin") != "http://evil.example"


def test_queue_full_is_429_with_retry_after(engine, make_server):
    srv = make_server(max_pending=2, retry_after_s=3)
    release, started = threading.Event(), threading.Event()

    def block(state, cancel, emit):
        started.set()
        release.wait(30)

    engine.submit(J.Call(block))
    started.wait(10)
    results = []

    def send():
        results.append(httpx.post(srv.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code)

    waiting = [threading.Thread(target=send) for _ in range(2)]
    for t in waiting:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "mtp_requests_in_flight 2" not in httpx.get(srv.url + "/metrics").text:
        time.sleep(0.02)
    r = httpx.post(srv.url + "/v1/chat/completions", json=CHAT)
    assert r.status_code == 429 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["type"] == "rate_limit_error"
    release.set()
    for t in waiting:
        t.join(30)
    assert results == [200, 200]


def test_disconnect_mid_stream_cancels_and_the_next_request_is_undisturbed(server, engine, request):
    follow = {"model": MODEL, "prompt": "After the disconnect, say something.", "max_tokens": 30}
    want = httpx.post(server.url + "/v1/completions", json=follow).json()["choices"][0]["text"]
    before = engine.totals().generated_tokens
    # ignore_eos: nothing but the disconnect can end it before 400 tokens (the context holds them)
    body = {"model": MODEL, "prompt": "A long story: ", "max_tokens": 400, "stream": True, "ignore_eos": True}
    ends: list[J.Done | J.Failed] = []

    def watch(h, ev):
        if isinstance(ev, (J.Done, J.Failed)) and getattr(h.job, "prompt", None) == body["prompt"]:
            ends.append(ev)

    engine.observe(watch)  # this package's shared engine: left again at the end
    request.addfinalizer(lambda: engine.unobserve(watch))
    with httpx.stream("POST", server.url + "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in got)
    # the job was cancelled, not stopped: the engine says so, with far fewer than 400 tokens
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not ends:
        time.sleep(0.01)
    (end,) = ends
    assert isinstance(end, J.Done) and end.cancelled and end.result.stop_reason is StopReason.CANCELLED
    assert len(end.result.tokens) < 400 and engine.totals().generated_tokens - before < 400
    again = httpx.post(server.url + "/v1/completions", json=follow).json()["choices"][0]["text"]
    assert again == want


def test_health_metrics_and_unknown_routes(server):
    h = httpx.get(server.url + "/health").json()
    assert h == {"status": "ok", "models": [MODEL]}
    httpx.post(server.url + "/v1/chat/completions", json=CHAT)
    m = httpx.get(server.url + "/metrics").text
    for name in (
        "mtp_requests_total",
        "mtp_generated_tokens_total",
        "mtp_draft_tokens_total",
        "mtp_draft_accepted_total",
        "mtp_acceptance_ratio",
        "mtp_queue_depth",
    ):
        assert f"# TYPE {name}" in m
    assert 'mtp_requests_total{route="/v1/chat/completions",status="200"}' in m
    r = httpx.get(server.url + "/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "http_404"
    assert httpx.get(server.url + "/v1/chat/completions").status_code == 405


def test_streaming_sse_format(server):
    body = dict(CHAT, stream=True)
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and "timings" in chunks[-1]


def test_listening_socket_lets_asyncio_disable_nagle(server):
    """asyncio sets TCP_NODELAY only on connections accepted from a socket whose proto is
    IPPROTO_TCP; with proto 0 every response after the first on a kept-alive connection
    stalled ~40 ms (Nagle + delayed ACK), which `mtp-studio bench server` showed as
    request overhead."""
    import socket

    assert server.socket.proto == socket.IPPROTO_TCP
    # and the keep-alive connection still serves request after request
    with httpx.Client() as c:
        assert [c.get(server.url + "/health").status_code for _ in range(5)] == [200] * 5
