"""One thinking switch: every API's way of asking reads as the same Thinking, and chat
completions take OpenAI's ``reasoning_effort``."""

from __future__ import annotations

import pytest

from engine.runtime.decider import resolve
from engine.runtime.modelinfo import ModelInfo
from engine.server.apis import thinking
from engine.server.errors import HTTPError
from engine.server.schemas import parse_chat

MODELS = {"m": ModelInfo(name="m", path="m.gguf")}


@pytest.mark.parametrize(
    "asks,want",
    [
        (
            [thinking.anthropic({"type": "disabled"}), thinking.responses({"effort": "none"}), thinking.ollama(False)],
            thinking.Thinking(False, None),
        ),
        (
            [thinking.responses({"effort": "low"}), thinking.ollama("low"), thinking.chat({"reasoning_effort": "low"})],
            thinking.Thinking(True, 1024),
        ),
        (
            [thinking.anthropic({"type": "enabled", "budget_tokens": 4096}), thinking.ollama("medium")],
            thinking.Thinking(True, 4096),
        ),
        (
            [thinking.anthropic(None), thinking.responses(None), thinking.ollama(None), thinking.chat({})],
            thinking.Thinking(),
        ),
    ],
)
def test_every_api_asks_the_same_way(asks, want):
    assert all(a == want for a in asks)


def test_chat_completions_take_reasoning_effort():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "minimal"}
    job = parse_chat(body, MODELS, resolve).job
    assert job.chat_template_kwargs == {"enable_thinking": False} and job.thinking_budget is None
    body |= {"reasoning_effort": "medium", "thinking_budget_tokens": 77}
    job = parse_chat(body, MODELS, resolve).job
    assert job.chat_template_kwargs == {"enable_thinking": True} and job.thinking_budget == 77
    # what chat_template_kwargs says wins over the word
    body |= {"chat_template_kwargs": {"enable_thinking": False}}
    assert parse_chat(body, MODELS, resolve).job.chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize(
    "ask,param",
    [
        (lambda: thinking.chat({"reasoning_effort": "huge"}), "reasoning_effort"),
        (lambda: thinking.responses({"effort": 3}), "reasoning.effort"),
        (lambda: thinking.ollama("xhigh"), "think"),
        (lambda: thinking.anthropic({"type": "enabled", "budget_tokens": "many"}), "thinking.budget_tokens"),
    ],
)
def test_a_bad_ask_is_refused_naming_its_parameter(ask, param):
    with pytest.raises(HTTPError) as e:
        ask()
    assert e.value.status == 400 and e.value.param == param
