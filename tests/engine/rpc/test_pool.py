"""A model across two loopback RPC servers: it loads, decodes like the local run, keeps
MTP drafting local, and a server killed mid-generation is survived.

Identity uses the bit-exactness issue's semantics: equal to the reference tokens, or
different only where the reference's one-at-a-time top-2 logits are within the measured
batch noise (llama.cpp's kernels are not batch-invariant).
"""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from engine.errors import (
    InvalidRequestError,
    InvalidSettingError,
    NativeCrashError,
    RpcBusyError,
    RpcConnectionLostError,
    RpcUnreachableError,
    RpcVersionError,
)
from engine.rpc.endpoints import hello
from engine.rpc.proxy import CountingProxy
from engine.runtime import jobs as J
from engine.runtime.decode.depth import AUTO, Mtp
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.measure.batchnoise import check_within_noise, reference, replay
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.demo import demo_model_path
from tests.engine.rpc.conftest import free_port, start_server

PROMPTS = (
    'import os\n\n\ndef list_files(path):\n    """Return the names of the files in path."""\n',
    'class Stack:\n    """A last-in, first-out stack."""\n\n    def __init__(self):\n',
)


def _spec(*endpoints, **kw) -> LoadSpec:
    return LoadSpec(demo_model_path(), n_ctx=1024, max_draft_depth=4, rpc=tuple(str(e) for e in endpoints), **kw)


def _gen(engine, prompt, mtp="on", depth=2, n=64, **kw):
    job = J.Generate(prompt=prompt, max_tokens=n, mtp=mtp, draft_depth=depth, ignore_eog=True, **kw)
    return engine.submit(job).result(120)


@pytest.fixture(scope="module")
def local():
    lm = load(LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED, n_ctx=1024, max_draft_depth=4))
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def pooled(rpc_pair):
    with Engine() as engine:
        info = engine.submit(J.LoadModel(_spec(*(s.endpoint for s in rpc_pair)))).result(120)
        yield engine, info


def test_model_loads_across_both_servers_with_the_mtp_head_local(pooled, rpc_pair):
    _, info = pooled
    devices = info.placement["devices"]
    assert [d["endpoint"] for d in devices] == [str(s.endpoint) for s in rpc_pair] + [None]
    assert all(d["memory_total"] > 0 for d in devices)
    assert sum(d["layers"] for d in devices) == 4 and all(d["layers"] >= 1 for d in devices)
    assert info.placement["mtp_and_output"] == devices[-1]["name"] and not devices[-1]["remote"]
    assert list(info.rpc) == [str(s.endpoint) for s in rpc_pair] and info.mtp == "integrated"


def test_greedy_and_mtp_output_equal_the_local_run(pooled, local):
    engine, _ = pooled
    drafted = accepted = 0
    for text in PROMPTS:
        prompt = local.model.prompt_tokens(text)
        noise = replay(local, prompt, *reference(local, prompt, 32), width=4).max_abs_diff
        local_plain = _gen_local(local, text)
        remote_plain = _gen(engine, text, mtp="off").tokens
        assert remote_plain == local_plain or check_within_noise(local, prompt, remote_plain, 2 * noise) == []
        for depth in (1, 3, "auto"):
            g = _gen(engine, text, depth=depth)
            assert g.stats.accepted > 0, depth
            drafted, accepted = drafted + g.stats.drafted, accepted + g.stats.accepted
            assert g.tokens == remote_plain or check_within_noise(local, prompt, g.tokens, 2 * noise) == [], depth
    assert 0 < accepted < drafted  # rejected drafts too: rollbacks ran on the remote layers' state


def _gen_local(lm, text):
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams

    return generate(lm.session, lm.model.prompt_tokens(text), DecodeParams(max_tokens=64, ignore_eog=True)).tokens


def test_a_separate_head_stays_on_this_machine(fixtures):
    """External MTP: the trunk is pooled, the head model is on this machine, and drafting costs
    no more round trips per forward than plain decoding (verify batches a few)."""
    server = start_server()
    proxy = CountingProxy(server.endpoint)
    fx = fixtures["partial"]
    try:
        with Engine() as engine:
            spec = LoadSpec(fx.trunk, head=fx.head, mtp=MtpSource.EXTERNAL, n_ctx=512, rpc=(str(proxy.endpoint),))
            info = engine.submit(J.LoadModel(spec)).result(120)
            assert info.mtp == "external" and info.placement["devices"][0]["endpoint"] == str(proxy.endpoint)
            per_forward = {}
            for mtp in ("off", "on"):
                proxy.reset()
                g = _gen(engine, [1, 2, 3], mtp=mtp, depth=3, n=32)
                per_forward[mtp] = proxy.round_trips / g.stats.target_forwards
                if mtp == "off":
                    plain = g.tokens
            assert g.stats.accepted > 0 and g.tokens == plain  # constructed margins: no near-ties
            assert per_forward["on"] <= per_forward["off"] * 1.25 + 0.5, per_forward
    finally:
        proxy.close()
        server.stop()


def test_a_busy_server_is_named_instead_of_waited_on(pooled, rpc_pair):
    """llama.cpp's server serves one client at a time; its client would wait forever."""
    with pytest.raises(RpcBusyError, match=rf"{rpc_pair[0].endpoint}.*one client at a time"):
        hello(rpc_pair[0].endpoint, timeout=1)


def test_drafts_never_cross_the_network():
    """Round trips per target forward are the same with and without MTP: the NextN block,
    its KV cache and the output layer are on this machine, so a draft costs none."""
    servers = [start_server(), start_server()]
    proxies = [CountingProxy(s.endpoint) for s in servers]
    try:
        with Engine() as engine:
            engine.submit(J.LoadModel(_spec(*(p.endpoint for p in proxies)))).result(120)
            per_forward = {}
            for mtp, depth in (("off", 1), ("on", 3)):
                for p in proxies:
                    p.reset()
                g = _gen(engine, PROMPTS[0], mtp=mtp, depth=depth)
                per_forward[mtp] = sum(p.round_trips for p in proxies) / g.stats.target_forwards
                if mtp == "on":
                    assert g.stats.target_forwards < len(g.tokens) - 8  # speculation did save forwards
        assert per_forward["on"] <= per_forward["off"] * 1.25 + 0.5, per_forward
    finally:
        for p in proxies:
            p.close()
        for s in servers:
            s.stop()


def test_a_server_killed_mid_generation_is_survived_and_the_model_reloads():
    helper, victim = start_server(), start_server()
    with Engine() as engine:
        engine.submit(J.LoadModel(_spec(helper.endpoint, victim.endpoint))).result(120)
        handle = engine.submit(J.Generate(prompt=PROMPTS[0], max_tokens=100_000, ignore_eog=True, draft_depth=2))
        got_tokens = False
        with pytest.raises(RpcConnectionLostError) as err:
            for ev in handle.events(timeout=120):
                if isinstance(ev, J.Tokens) and not got_tokens:
                    got_tokens = True
                    victim.kill()  # as a helper machine losing power
            handle.result()
        assert got_tokens
        msg = str(err.value)
        assert "was lost" in msg and "load it again" in msg and str(victim.endpoint) in msg
        assert engine.models() == {}  # unloaded, visibly
        # the engine thread lives on: a plain local load and a pooled reload both work
        assert engine.submit(J.LoadModel(LoadSpec(demo_model_path(), n_ctx=512))).result(60).rpc == ()
        victim = start_server()
        engine.submit(J.LoadModel(_spec(helper.endpoint, victim.endpoint))).result(120)
        assert len(_gen(engine, PROMPTS[1], n=16).tokens) == 16
    victim.stop()
    helper.stop()


def test_a_crashed_worker_is_reported_as_a_crash_and_forgotten():
    """A worker that dies for another reason than RPC (here: killed) is not called a lost
    connection, and its model is unloaded all the same."""
    server = start_server()
    try:
        with Engine() as engine:
            engine.submit(J.LoadModel(_spec(server.endpoint))).result(120)
            worker = engine._state.models["demo"]  # the seam: the worker process itself
            worker.kill()
            with pytest.raises(NativeCrashError, match=r"worker process running this model .* stopped \(signal 9\)"):
                _gen(engine, PROMPTS[0], n=8)
            assert engine.models() == {}
    finally:
        server.stop()


def test_a_call_that_cannot_reach_the_worker_is_refused_with_words(pooled):
    engine, _ = pooled
    with pytest.raises(InvalidRequestError, match="cannot be sent to the worker process"):
        engine.submit(J.Call(lambda state, cancel, emit: 1)).result(30)
    assert len(_gen(engine, PROMPTS[1], n=4).tokens) == 4  # nothing was sent: the worker carries on


def test_cancel_reaches_the_worker_and_is_not_an_error(pooled):
    engine, _ = pooled
    handle = engine.submit(J.Generate(prompt=PROMPTS[0], max_tokens=100_000, ignore_eog=True))
    for ev in handle.events(timeout=120):
        if isinstance(ev, J.Tokens):
            handle.cancel()
        if isinstance(ev, (J.Done, J.Failed)):
            break
    assert isinstance(ev, J.Done) and ev.cancelled
    assert len(_gen(engine, PROMPTS[1], n=8).tokens) == 8  # the worker carries on


def test_unreachable_or_foreign_servers_fail_the_load_with_words_not_an_abort():
    dead = f"127.0.0.1:{free_port()}"
    with Engine() as engine:
        with pytest.raises(RpcUnreachableError, match=dead):
            engine.submit(J.LoadModel(_spec(dead))).result(60)
        with _FakeServer(bytes([9, 0, 0, 0]) + bytes(24)) as fake:  # a newer protocol llama.cpp would abort on
            with pytest.raises(RpcVersionError, match="speaks protocol 9.0.0"):
                engine.submit(J.LoadModel(_spec(fake))).result(60)
        with _FakeServer(b"HTTP/1.1 400 Bad Request\r\n\r\n") as fake:
            with pytest.raises(RpcVersionError, match="did not answer like a llama.cpp RPC server"):
                engine.submit(J.LoadModel(_spec(fake))).result(60)
        with pytest.raises(InvalidSettingError, match="Exact mode"):
            engine.submit(J.LoadModel(_spec(dead, exact=True))).result(60)
        assert engine.submit(J.LoadModel(LoadSpec(demo_model_path(), n_ctx=512))).result(60)


class _FakeServer:
    """Something else listening where an RPC server should be (the seam: a foreign peer)."""

    def __init__(self, payload: bytes):
        self.payload = payload
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(64)
                body = (
                    self.payload
                    if self.payload.startswith(b"HTTP")
                    else struct.pack("<Q", len(self.payload)) + self.payload
                )
                conn.sendall(body)

    def __str__(self):
        return self.endpoint

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()


def test_the_weight_cache_is_handed_to_llama_cpp(tmp_path):
    """llama.cpp caches only tensors over 10 MiB (none in the demo); the load-time effect
    is measured by ``benchmarks.models.rpc``. Here: the server is started with the folder."""
    server = start_server(cache=True, cache_dir=tmp_path / "rpc-cache")
    try:
        with Engine() as engine:
            engine.submit(J.LoadModel(_spec(server.endpoint))).result(120)
        assert f"local cache    : {tmp_path / 'rpc-cache'}" in server.log_text()
        assert (tmp_path / "rpc-cache").is_dir()
    finally:
        server.stop()


def test_a_request_without_a_depth_gets_the_engines_default_locally_and_pooled():
    """Defaults are resolved before a job goes to the worker process: a pooled model runs
    at the depth a local one does (the worker used to fall back to its own default, 1)."""
    helper = start_server()  # its own: an RPC server serves one client, and the pair is held
    try:
        got = {}
        for where, spec in (("local", _spec()), ("pooled", _spec(helper.endpoint))):
            with Engine(EngineConfig(request=Defaults(draft_depth="auto"))) as engine:
                engine.submit(J.LoadModel(spec)).result(120)
                got[where] = engine.submit(J.Generate(prompt=PROMPTS[0], max_tokens=16, ignore_eog=True)).result(120)
    finally:
        helper.stop()
    assert got["local"].stats.draft_depth == got["pooled"].stats.draft_depth == AUTO
    assert got["pooled"].stats.mtp is Mtp.ON


def test_the_prompt_cache_budget_reaches_the_worker_and_its_figures_come_back(pooled):
    """A model on remote devices runs in a worker process: a budget set after the load
    reaches that process's prompt cache, and its figures are the engine's (the Server
    page and /metrics read them)."""
    from engine.settings import DEFAULT_PROMPT_CACHE_MB

    engine, _ = pooled
    try:
        engine.set_prompt_cache_mb(0)
        for p in PROMPTS:
            _gen(engine, p, n=24)
        off = engine.prompt_cache_info()
        assert off.budget_bytes == 0 and off.entries == 0 and off.bytes == 0

        engine.set_prompt_cache_mb(64)
        for p in PROMPTS:  # the second prompt throws the first conversation's state away: it is saved
            _gen(engine, p, n=24)
        on = engine.prompt_cache_info()
        assert on.budget_bytes == 64 << 20
        assert on.saved > off.saved and on.entries > 0 and 0 < on.bytes <= 64 << 20

        engine.set_prompt_cache_mb(0)  # a smaller budget evicts in the worker too
        _gen(engine, PROMPTS[0], n=4)
        gone = engine.prompt_cache_info()
        assert gone.entries == 0 and gone.bytes == 0 and gone.evicted >= on.entries
    finally:
        engine.set_prompt_cache_mb(DEFAULT_PROMPT_CACHE_MB)
