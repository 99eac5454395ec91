"""Every tool-call family, served: the demo model carrying each family's real template
(fetched with the vendored corpus, tests.realtemplates; loaded with the template as an
override, as ``--chat-template-file`` does) calls a tool under ``tool_choice: required``
through the official ``openai`` client, in the family's own syntax, with and without MTP,
whole and streamed."""

from __future__ import annotations

import json

import pytest

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.prompt import calls, reasoning
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings
from tests.callharness import ROOT, templates

#: template -> the call format it is read in (every native family the issue names, and
#: the earlier ones)
FAMILIES = {
    "GLM-4.7-Flash.jinja": "glm-4.7",
    "GLM-4.6.jinja": "glm",
    "inclusionai-ling-3.0-flash.jinja": "ling",
    "tencent-Hy3.jinja": "hy3",
    "deepseek-ai-DeepSeek-V3.2.jinja": "dsml",
    "deepseek-ai-DeepSeek-V4.jinja": "dsml-v4",
    "google-gemma-4-31B-it.jinja": "gemma4",
    "openai-gpt-oss-120b.jinja": "harmony",
    "Kimi-K2-Instruct.jinja": "kimi",
    "Kimi-K3.jinja": "kimi-k3",
    "MiniMax-M1.jinja": "minimax-m1",
    "MiniMax-M2.jinja": "minimax",
    "MiniMax-M3.jinja": "minimax-m3",
    "Cohere2MoE.jinja": "cohere",
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron",
    "Qwen3.5-4B.jinja": "qwen-xml",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral-args",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek",
    "ByteDance-Seed-OSS.jinja": "seed-xml",
}
ALARM = {
    "type": "function",
    "function": {
        "name": "set_alarm",
        "description": "Set an alarm",
        "parameters": {
            "type": "object",
            "properties": {
                "day": {"type": "string", "enum": ["mon", "tue", "wed"]},
                "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                "label": {"type": "string", "maxLength": 12},
            },
            "required": ["day", "hour"],
        },
    },
}
ASK = [{"role": "system", "content": "You set alarms."}, {"role": "user", "content": "Wake me on Tuesday at 7."}]


@pytest.fixture(scope="module")
def served():
    found = templates()
    eng = Engine(EngineConfig(request=Defaults(draft_depth=3))).start()
    srv = ServerThread(eng, ServerSettings(port=0, max_tokens=200, thinking_budget=8)).start()
    srv.wait_ready()

    def model(template: str) -> str:
        name = template.removesuffix(".jinja")
        if name not in eng.models():  # one at a time, as the app runs them
            spec = LoadSpec(
                ROOT / "resources" / "demo.gguf",
                mtp=MtpSource.INTEGRATED,
                n_ctx=2048,
                name=name,
                chat_template=found[template],
            )
            eng.submit(J.LoadModel(spec)).result(60)
        return name

    yield srv, eng, model
    srv.stop()
    eng.stop()


@pytest.fixture(scope="module")
def client(served):
    from openai import OpenAI

    with OpenAI(base_url=served[0].url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def _valid(call) -> dict:
    assert call.function.name == "set_alarm"
    args = json.loads(call.function.arguments)
    assert args["day"] in ("mon", "tue", "wed") and isinstance(args["hour"], int) and 0 <= args["hour"] <= 23, args
    assert set(args) <= {"day", "hour", "label"}
    assert "label" not in args or (isinstance(args["label"], str) and len(args["label"]) <= 12), args
    return args


@pytest.mark.parametrize("template", list(FAMILIES))
def test_the_demo_calls_in_each_familys_own_syntax_with_and_without_mtp(served, client, template):
    srv, eng, model = served
    name = model(template)
    info = eng.models()[name]
    assert info.tool_format == FAMILIES[template]
    kw = dict(model=name, messages=ASK, tools=[ALARM], tool_choice="required", parallel_tool_calls=False)
    replies = {}
    for mtp in ("off", "on"):
        r = client.chat.completions.create(**kw, extra_body={"mtp": mtp})
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", (template, choice)
        assert not choice.message.content, f"{template}: markup in the content: {choice.message.content!r}"
        assert len(choice.message.tool_calls) == 1
        replies[mtp] = [(c.function.name, _valid(c)) for c in choice.message.tool_calls]
    # the same call with MTP: the tool, the enum and the integer; a free-text value may differ
    # at a near-tie, as llama.cpp's default kernels are not batch-invariant (docs/mtp.md:
    # bit-identical only in exact mode, which must be chosen before llama.cpp starts)
    assert [(n, a["day"], a["hour"]) for n, a in replies["on"]] == [(n, a["day"], a["hour"]) for n, a in replies["off"]]
    # streamed: the arguments arrive in pieces as they are written, and join into the call
    pieces: dict[int, list[str]] = {}
    finish = None
    with client.chat.completions.create(**kw, stream=True, extra_body={"mtp": "on"}) as stream:
        for chunk in stream:
            if not chunk.choices:
                continue
            c = chunk.choices[0]
            for tc in c.delta.tool_calls or []:
                pieces.setdefault(tc.index, []).append(tc.function.arguments or "")
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    streamed = [json.loads("".join(p)) for _, p in sorted(pieces.items())]
    assert [(a["day"], a["hour"]) for a in streamed] == [(a["day"], a["hour"]) for _, a in replies["on"]]
    # (in as many pieces as the stream's pauses cut them into: tests/server/test_bridge.py)
    assert all(any(p) for p in pieces.values()), pieces


def test_every_vendored_template_that_declares_tools_is_native_or_named_generic():
    """Each template that renders ``tools`` is read in a native family, or is in the docs'
    list of generic templates, with the reason (docs/tools.md)."""
    generic = (ROOT / "docs" / "tools.md").read_text(encoding="utf-8")
    missing = []
    for name, source in sorted(templates().items()):
        if not calls.renders_tools(source):
            continue
        if calls.detect(source).format is calls.GENERIC and f"`{name}`" not in generic:
            missing.append(name)
    assert missing == []


@pytest.mark.parametrize(
    "template", ["tencent-Hy3.jinja", "MiniMax-M3.jinja", "Cohere2MoE.jinja", "Kimi-K3.jinja", "Qwen3.5-4B.jinja"]
)
def test_thinking_is_split_in_the_familys_markers_and_a_budget_closes_it(served, client, template):
    """Templates whose prompt opens the thinking block when thinking is on: the reply's
    thinking is reasoning, the budget closes the block in the family's own end marker, and
    turning thinking off leaves none."""
    _, eng, model = served
    name = model(template)
    assert eng.models()[name].think_toggle
    thinking = reasoning.detect(templates()[template])
    on = client.chat.completions.create(
        model=name,
        messages=ASK,
        max_tokens=40,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}, "thinking_budget_tokens": 6},
    )
    m = on.choices[0].message
    assert m.model_extra.get("reasoning_content"), (template, m)
    assert thinking.end not in (m.content or "") and thinking.start not in (m.content or "")
    # the budget, and the end marker's tokens (at most one a character in the demo's vocabulary)
    assert on.model_extra["timings"]["thinking"]["predicted_n"] <= 6 + len(thinking.end)
    off = client.chat.completions.create(
        model=name, messages=ASK, max_tokens=20, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    assert not off.choices[0].message.model_extra.get("reasoning_content")
