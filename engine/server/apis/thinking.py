"""One thinking switch for every API: each API's own way of asking (chat completions'
``reasoning_effort``, Responses' ``reasoning.effort``, Anthropic's ``thinking``, Ollama's
``think``) read as one :class:`Thinking` — on, off or the template's default, and a
budget — which every API hands the engine the same way (the template's
``enable_thinking``, the job's ``thinking_budget``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.server.errors import bad

#: an effort word as (thinking on, budget in tokens: None for none), OpenAI's words and
#: Ollama's (low/medium/high)
EFFORT: dict[str, tuple[bool, int | None]] = {
    "none": (False, None),
    "minimal": (False, None),
    "low": (True, 1024),
    "medium": (True, 4096),
    "high": (True, None),
    "xhigh": (True, None),
}


@dataclass(frozen=True)
class Thinking:
    """What a request asked of the model's thinking: ``on`` (None: the template's
    default) and a budget in tokens (None: none)."""

    on: bool | None = None
    budget: int | None = None

    @property
    def template_kwargs(self) -> dict | None:
        """The template argument that switches it (None: the request left it alone)."""
        return None if self.on is None else {"enable_thinking": self.on}

    def job_fields(self) -> dict[str, Any]:
        """The fields of a :class:`~engine.runtime.jobs.Generate` it sets."""
        return {"chat_template_kwargs": self.template_kwargs, "thinking_budget": self.budget}


def effort(value: Any, param: str, words: tuple[str, ...] = tuple(EFFORT)) -> Thinking:
    """An effort word (``param`` names it in the refusal; ``words``: the API's own)."""
    if value is None:
        return Thinking()
    if not isinstance(value, str) or value not in words:
        raise bad(f"{param} must be one of {', '.join(words)}", param)
    on, budget = EFFORT[value]
    return Thinking(on, budget)


def anthropic(raw: Any) -> Thinking:
    """Anthropic's ``thinking``: ``{"type": "enabled", "budget_tokens": N}``, ``disabled``
    or ``adaptive`` (on, no budget)."""
    if raw is None:
        return Thinking()
    if not isinstance(raw, dict) or raw.get("type") not in ("enabled", "disabled", "adaptive"):
        raise bad("thinking must be {'type': 'enabled', 'budget_tokens': N} or {'type': 'disabled'}", "thinking")
    if raw["type"] == "disabled":
        return Thinking(False)
    budget = raw.get("budget_tokens")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise bad("thinking.budget_tokens must be an integer", "thinking.budget_tokens")
    return Thinking(True, budget)


def responses(raw: Any) -> Thinking:
    """OpenAI Responses' ``reasoning``: ``{"effort": word}``."""
    if raw is None:
        return Thinking()
    if not isinstance(raw, dict):
        raise bad("'reasoning' must be an object", "reasoning")
    return effort(raw.get("effort"), "reasoning.effort")


def ollama(raw: Any) -> Thinking:
    """Ollama's ``think``: true, false, or an effort word (low, medium, high)."""
    if raw is None:
        return Thinking()
    if isinstance(raw, bool):
        return Thinking(raw)
    if isinstance(raw, str) and raw in ("low", "medium", "high"):
        return effort(raw, "think")
    raise bad("'think' must be true, false, 'low', 'medium' or 'high'", "think")


def chat(body: dict) -> Thinking:
    """Chat completions: OpenAI's ``reasoning_effort``, with llama-server's
    ``thinking_budget_tokens`` (a budget of its own, over the word's)."""
    t = effort(body.get("reasoning_effort"), "reasoning_effort")
    budget = body.get("thinking_budget_tokens")
    return t if budget is None else Thinking(t.on, budget)
