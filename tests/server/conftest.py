"""A real engine and a real HTTP server on a free loopback port."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.decider import INTERACTIVE
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

MODEL = "partial"


@pytest.fixture(scope="package")
def engine(fixtures):
    eng = Engine(EngineConfig(request=Defaults(draft_depth=2))).start()
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


@pytest.fixture(scope="module")
def agent_served(qwen35_template_model, hermes_template_model):
    """The agent-API tests' engine and server: Qwen3.5's and Qwen2.5's templates on tiny models
    (tests/server/agentapis.py)."""
    from tests.server.agentapis import HERMES, QWEN

    from tests.server.serving import serving

    specs = [
        LoadSpec(path, mtp=MtpSource.INTEGRATED, n_ctx=4096, name=name)
        for path, name in ((qwen35_template_model, QWEN), (hermes_template_model, HERMES))
    ]
    settings = ServerSettings(port=0, max_tokens=64, thinking_budget=12)
    with serving(specs, settings, EngineConfig(request=INTERACTIVE)) as served:
        yield served


@pytest.fixture
def oai(agent_served):
    from openai import OpenAI

    with OpenAI(base_url=agent_served[0].url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
def claude(agent_served):
    import anthropic

    with anthropic.Anthropic(base_url=agent_served[0].url, api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
def serve(library):
    """Make ``Served`` endpoints over the module's ``library`` (the on-demand tests'), each
    closed after the test."""
    from tests.server.ondemandserving import Served

    made: list[Served] = []

    def make(**kw) -> Served:
        s = Served(library, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
