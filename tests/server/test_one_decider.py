"""A request is decided once: the endpoint resolves it before it is queued (defaults,
checks, the conversation normalized), the engine runs that job as it is, and what a
request needs to know of the template was found when the model loaded."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequestError
from engine.runtime import engine as engine_mod
from engine.runtime import jobs as J
from engine.runtime import decider as request_mod
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.prompt import calls, reasoning
from engine.runtime.prompt.templates import ChatTemplate
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.decider import BUILTIN, INTERACTIVE
from engine.server import schemas
from engine.server.apis import messages as messages_api, ollama as ollama_api, responses as responses_api
from engine.server.errors import HTTPError
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

CHAT = [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Hello?"}]


@pytest.fixture(scope="module")
def qwen_server(qwen35_template_model):
    eng = Engine(EngineConfig(request=INTERACTIVE)).start()
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


# ------------------------------------------------------- every API, one decider
MODELS = {"m": ModelInfo(name="m", path="m.gguf", n_ctx=512)}
ASK = [{"role": "user", "content": "Hi"}]


def _decide(job: J.Generate) -> J.Generate:
    return request_mod.resolve(job, INTERACTIVE)


def _job(api: str, body: dict, defaults: J.Defaults | None = None) -> J.Generate:
    """``body`` (the model and the conversation added) as ``api``'s parser decides it."""
    if api == "chat":
        return schemas.parse_chat({"model": "m", "messages": ASK, **body}, MODELS, _decide, defaults).job
    if api == "completions":
        return schemas.parse_completion({"model": "m", "prompt": "Hi", **body}, MODELS, _decide, defaults).job
    if api == "responses":
        return responses_api.parse({"model": "m", "input": "Hi", **body}, MODELS, _decide, defaults).job
    if api == "messages":
        return messages_api.parse({"model": "m", "messages": ASK, **body}, MODELS, _decide, defaults).job
    assert api == "ollama"
    return ollama_api.parse({"model": "m", "messages": ASK, **body}, MODELS, _decide, defaults, chat=True).job


#: each API's name for the reply's length
LENGTH = {
    "chat": "max_tokens",
    "completions": "max_tokens",
    "responses": "max_output_tokens",
    "messages": "max_tokens",
}


@pytest.mark.parametrize("api", LENGTH)
@pytest.mark.parametrize("bad", [0, -5])
def test_every_api_bounds_the_reply_length_by_the_deciders_one_rule(api, bad):
    with pytest.raises(InvalidRequestError) as direct:
        request_mod.resolve(J.Generate(prompt="x", max_tokens=bad))
    with pytest.raises(InvalidRequestError) as err:
        _job(api, {LENGTH[api]: bad})
    assert (type(err.value), err.value.param, str(err.value)) == (type(direct.value), "max_tokens", str(direct.value))
    assert _job(api, {LENGTH[api]: 1}).max_tokens == 1


def test_messages_requires_max_tokens_in_its_own_words():
    with pytest.raises(HTTPError) as err:
        _job("messages", {})
    assert err.value.status == 400 and err.value.param == "max_tokens" and "required" in str(err.value)


def test_ollama_num_predict_no_limit_values_take_the_default_and_a_non_number_is_refused():
    for n in (0, -1, -2):  # Ollama limits nothing for these: here the defaults' length
        assert _job("ollama", {"options": {"num_predict": n}}).max_tokens == INTERACTIVE.max_tokens
    assert _job("ollama", {"options": {"num_predict": 7}}).max_tokens == 7
    with pytest.raises(HTTPError) as err:
        _job("ollama", {"options": {"num_predict": 2.5}})  # no longer ignored in silence
    assert err.value.param == "num_predict" and "whole number" in str(err.value)


def test_the_responses_api_echoes_the_values_the_job_runs_with():
    echo = responses_api.parse({"model": "m", "input": "Hi"}, MODELS, _decide, None).echo
    assert (echo["temperature"], echo["top_p"]) == (BUILTIN.temperature, BUILTIN.top_p)  # not OpenAI's 1.0
    assert echo["parallel_tool_calls"] is BUILTIN.parallel_tool_calls
    echo = responses_api.parse(
        {"model": "m", "input": "Hi", "parallel_tool_calls": False},
        MODELS,
        _decide,
        J.Defaults(temperature=0.5),
    ).echo
    assert echo["temperature"] == 0.5 and echo["parallel_tool_calls"] is False


def test_reasoning_format_is_decided_once_for_the_chat_api():
    assert _job("chat", {"reasoning_format": "deepseek"}).reasoning_format == "auto"
    assert _job("chat", {}).reasoning_format == "auto" and _job("chat", {}).parallel_tool_calls is True
    with pytest.raises(InvalidRequestError) as err:
        _job("chat", {"reasoning_format": "deepseek-legacy"})
    assert err.value.param == "reasoning_format"


@pytest.mark.parametrize("fmt,split", [("auto", True), ("deepseek", True), ("none", False)])
def test_reasoning_format_decides_whether_the_reply_is_split(qwen_server, fmt, split):
    """What a decided ``reasoning_format`` does when the prompt is rendered: the thinking
    markers go to the reply's parser ("deepseek" as "auto"), or not at all ("none")."""
    eng, _srv = qwen_server
    job = eng.resolve(J.Generate(messages=list(CHAT), reasoning_format=fmt))
    plan = eng.submit(
        J.Call(lambda st, _c, _e: request_mod.prepare(job, st.get("q"), TokenizedTexts()).reply, access="read")
    ).result(30)
    assert plan.in_thinking  # the template opens the block either way
    assert (plan.thinking is not None) is split
