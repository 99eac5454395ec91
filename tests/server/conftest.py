"""A real engine and a real HTTP server on a free loopback port."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineDefaults
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

MODEL = "partial"


@pytest.fixture(scope="package")
def engine(fixtures):
    eng = Engine(EngineDefaults(request=Defaults(draft_depth=2))).start()
    eng.submit(J.LoadModel(LoadSpec(fixtures["partial"].path, mtp=MtpSource.INTEGRATED, n_ctx=512, name=MODEL))).result(
        60
    )
    yield eng
    eng.stop()


@pytest.fixture(scope="package")
def server(engine):
    srv = ServerThread(engine, ServerSettings(port=0, max_pending=32)).start()
    srv.wait_ready()
    yield srv
    srv.stop()


@pytest.fixture
def make_server(engine):
    """Start a server with other settings (stopped after the test)."""
    started = []

    def make(**kw):
        srv = ServerThread(engine, ServerSettings(port=0, **kw)).start()
        srv.wait_ready()
        started.append(srv)
        return srv

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def client(server):
    from openai import OpenAI

    with OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c
