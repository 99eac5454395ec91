"""The endpoint against what a web page, a careless client or a hostile one sends.
Every request goes to this machine's loopback only; every loop is bounded in count and
time and stops by itself."""

from __future__ import annotations

import json
import random
import socket
import time

import httpx2 as httpx
import pytest

from engine.runtime import jobs as J
from tests.server.conftest import MODEL

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}


def _raw(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes to the endpoint and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def _post(port: int, path: str, body: bytes, *, host: str = "127.0.0.1", extra: str = "") -> tuple[int, dict]:
    req = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    raw = _raw(port, req)
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload or b"{}")


# ------------------------------------------------------- DNS rebinding, cross-site
def test_a_foreign_host_name_is_refused_while_loopback_names_are_served(server, engine):
    jobs = engine.totals().jobs
    status, body = _post(
        server.port, "/v1/chat/completions", json.dumps(CHAT).encode(), host=f"evil.example:{server.port}"
    )
    assert status == 400 and body["error"]["code"] == "invalid_host"
    assert engine.totals().jobs == jobs  # nothing ran
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost", f"[::1]:{server.port}"):
        r = httpx.get(server.url + "/v1/models", headers={"host": host})
        assert r.status_code == 200, host


def test_allowed_hosts_extend_the_loopback_names(make_server):
    srv = make_server(allowed_hosts=("studio.lan",))
    assert httpx.get(srv.url + "/v1/models", headers={"host": "studio.lan"}).status_code == 200
    assert httpx.get(srv.url + "/v1/models", headers={"host": "other.lan"}).status_code == 400


def test_a_simple_cross_site_post_runs_nothing(server, engine):
    """A web page may send text/plain POSTs without a preflight; they are refused."""
    jobs = engine.totals().jobs
    r = httpx.post(
        server.url + "/v1/chat/completions", content=json.dumps(CHAT), headers={"content-type": "text/plain"}
    )
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers={"origin": "null"})
    assert r.status_code == 403
    assert engine.totals().jobs == jobs


def test_an_allowed_origin_still_works(make_server):
    srv = make_server(cors_origins=("http://localhost:3000",))
    r = httpx.post(srv.url + "/v1/chat/completions", json=CHAT, headers={"origin": "http://localhost:3000"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"


# ------------------------------------------------------------ clear 400s, not 500s
@pytest.mark.parametrize(
    "patch,param",
    [
        ({"seed": -2}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"top_k": -1}, "top_k"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": "x" * 257}, "stop"),
        ({"temperature": 3}, "temperature"),
    ],
)
def test_out_of_range_values_are_400s(server, patch, param):
    r = httpx.post(server.url + "/v1/chat/completions", json={**CHAT, **patch})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_seed_minus_one_means_random(server):
    r = httpx.post(server.url + "/v1/chat/completions", json={**CHAT, "seed": -1, "temperature": 0.8})
    assert r.status_code == 200


@pytest.mark.parametrize("where", ["prompt", "message", "model"])
def test_a_lone_surrogate_is_a_400(server, where):
    bad = '"\\ud800 hi"'
    body = {
        "prompt": f'{{"model": "{MODEL}", "prompt": {bad}, "max_tokens": 2}}',
        "message": f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": {bad}}}], "max_tokens": 2}}',
        "model": f'{{"model": {bad}, "prompt": "hi", "max_tokens": 2}}',
    }[where]
    path = "/v1/chat/completions" if where == "message" else "/v1/completions"
    status, out = _post(server.port, path, body.encode())
    assert status == 400 and "surrogate" in out["error"]["message"]


def test_deeply_nested_json_is_a_400(server):
    status, out = _post(server.port, "/v1/completions", b"[" * 200_000 + b"]" * 200_000)
    assert status in (400, 413)
    status, out = _post(server.port, "/v1/completions", b'{"model": "x", "a": ' + b"[" * 100 + b"]" * 100 + b"}")
    assert status == 400 and "nested too deeply" in out["error"]["message"]


# -------------------------------------------------------------------- slow clients
def test_half_open_connections_are_closed_at_the_head_deadline(make_server):
    srv = make_server(header_timeout_s=0.5)
    socks = []
    try:
        for _ in range(30):  # bounded: 30 sockets, each sends part of a request head
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(s)
        t0 = time.monotonic()
        closed = 0
        for s in socks:
            s.settimeout(max(0.1, 5 - (time.monotonic() - t0)))
            try:
                closed += s.recv(1024) == b""
            except (ConnectionResetError, TimeoutError):
                closed += 0
        assert closed == 30 and time.monotonic() - t0 < 5
    finally:
        for s in socks:
            s.close()
    assert httpx.get(srv.url + "/health").status_code == 200


def test_a_body_that_stops_arriving_gets_408(make_server):
    srv = make_server(body_timeout_s=0.5)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model"'
        )
        t0 = time.monotonic()
        answer = s.recv(4096)
    assert answer.split()[1] == b"408" and time.monotonic() - t0 < 4


# -------------------------------------------------------------------------- fuzz
def _random_json(rng: random.Random, depth: int = 0):
    kinds = ["int", "neg", "float", "str", "bool", "null", "list", "dict"] if depth < 3 else ["int", "str", "null"]
    k = rng.choice(kinds)
    if k == "int":
        return rng.choice([0, 1, 2, 5, 10**20])
    if k == "neg":
        return -rng.randint(1, 10**6)
    if k == "float":
        return rng.choice([0.5, -1.5, 1e308, 3.0])
    if k == "str":
        return rng.choice(["", "x", MODEL, "user", "auto", "é" * 3])
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice(["role", "content", "model", "x"]): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))
    }


FIELDS = [
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "stop",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stream",
    "n",
    "draft_depth",
    "mtp",
    "stream_options",
    "logprobs",
    "response_format",
]


def test_fuzzed_request_bodies_get_only_client_errors_and_the_engine_lives(server, engine):
    rng = random.Random(1234)
    deadline = time.monotonic() + 40
    seen = set()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for i in range(300):
            if time.monotonic() > deadline:
                break
            body = {"model": MODEL, "max_tokens": 2} if rng.random() < 0.5 else {}
            for f in rng.sample(FIELDS, rng.randint(1, 6)):
                body[f] = _random_json(rng)
            if "max_tokens" in body and isinstance(body["max_tokens"], int) and body["max_tokens"] > 4:
                body["max_tokens"] = 4
            if rng.random() < 0.1:
                body = _random_json(rng)  # not even an object
            path = rng.choice(["/v1/chat/completions", "/v1/completions"])
            r = c.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
            seen.add(r.status_code)
            assert r.status_code in (200, 400, 404, 413, 429), (r.status_code, body, r.text)
            if r.status_code != 200:
                assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert 400 in seen
    # the engine thread is alive and serves a normal request
    assert engine.submit(J.Generate(model=MODEL, prompt="Hello", max_tokens=3)).result(30).tokens
