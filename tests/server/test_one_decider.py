"""A request is decided once: the endpoint resolves it before it is queued (defaults,
checks, the conversation normalized), the engine runs that job as it is, and what a
request needs to know of the template was found when the model loaded."""

from __future__ import annotations

import pytest

from engine.runtime import engine as engine_mod
from engine.runtime import jobs as J
from engine.runtime import request as request_mod
from engine.runtime.engine import Engine, EngineDefaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.prompt import calls, reasoning
from engine.runtime.prompt.templates import ChatTemplate
from engine.runtime.request import INTERACTIVE
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

CHAT = [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Hello?"}]


@pytest.fixture(scope="module")
def qwen_server(qwen35_template_model):
    eng = Engine(EngineDefaults(request=INTERACTIVE)).start()
    eng.submit(J.LoadModel(LoadSpec(qwen35_template_model, mtp=MtpSource.INTEGRATED, n_ctx=1024, name="q"))).result(60)
    srv = ServerThread(eng, ServerSettings(port=0)).start()
    srv.wait_ready()
    yield eng, srv
    srv.stop()
    eng.stop()


def _client(srv):
    from openai import OpenAI

    return OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def test_the_endpoint_resolves_once_and_the_engine_runs_that_job(qwen_server, monkeypatch):
    eng, srv = qwen_server
    resolved, normalized, ran = [], [], []
    real_resolve, real_normalize = request_mod.resolve, request_mod.normalize_messages

    def counting_resolve(job, defaults=None):
        if not job.resolved:
            resolved.append(job)
        return real_resolve(job, defaults)

    monkeypatch.setattr(engine_mod, "resolve", counting_resolve)
    monkeypatch.setattr(request_mod, "normalize_messages", lambda m: normalized.append(m) or real_normalize(m))
    eng.observe(lambda h, ev: ran.append(h.job) if isinstance(ev, J.Started) else None)
    with _client(srv) as c:
        tool_call = {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
        msgs = [
            *CHAT,
            {"role": "assistant", "content": None, "tool_calls": [tool_call]},
            {"role": "tool", "tool_call_id": "c1", "content": "noon"},
        ]
        r = c.chat.completions.create(model="q", messages=msgs, max_tokens=6)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert len(resolved) == 1 and len(normalized) == 1  # once, before the queue; not again on the engine thread
    job = ran[-1]
    assert job.resolved and job.defaults is None
    # the endpoint's settings leave max_tokens to the engine's layer; the request's own value wins
    assert job.max_tokens == 6 and job.draft_depth == INTERACTIVE.draft_depth
    # the conversation the engine runs is the normalized one: arguments as a mapping
    assert job.messages[2]["tool_calls"][0]["function"]["arguments"] == {}


def test_a_bad_value_is_refused_before_the_queue(qwen_server, monkeypatch):
    eng, srv = qwen_server
    submitted = []
    real_submit = eng.submit
    monkeypatch.setattr(eng, "submit", lambda job, **kw: submitted.append(job) or real_submit(job, **kw))
    from openai import BadRequestError

    with _client(srv) as c, pytest.raises(BadRequestError) as err:
        c.chat.completions.create(model="q", messages=CHAT, max_tokens=4, extra_body={"top_k": -3})
    assert "top_k" in str(err.value) and not submitted


def test_template_facts_are_found_at_load_not_per_request(qwen_server, monkeypatch):
    """The call format, the thinking markers and the renderings that place prompt-cache
    snapshots are kept with the loaded template: requests detect nothing, and a request
    with the system prompt of an earlier one renders the template once."""
    eng, srv = qwen_server
    info = eng.models()["q"]
    assert info.tool_format == calls.QWEN_XML.name and info.thinks

    def refuse(*_a, **_k):
        raise AssertionError("detected again at request time")

    monkeypatch.setattr(calls, "detect", refuse)
    monkeypatch.setattr(reasoning, "detect", refuse)
    renders = []
    real_render = ChatTemplate.render
    monkeypatch.setattr(ChatTemplate, "render", lambda self, *a, **k: renders.append(1) or real_render(self, *a, **k))
    system = {"role": "system", "content": "A system prompt no other test sends."}
    with _client(srv) as c:
        c.chat.completions.create(model="q", messages=[system, CHAT[1]], max_tokens=4)
        first = len(renders)
        again = [system, {"role": "user", "content": "And now?"}]
        r = c.chat.completions.create(model="q", messages=again, max_tokens=4)
    assert r.choices[0].message is not None
    # the second request: its prompt alone (the system prompt's end and the generation
    # prompt were learned by the first)
    assert first > 1 and len(renders) - first == 1  # the first also learned where snapshots go
