"""Thinking models: which templates think, in which markers, and where a reply's thinking ends.

Each family marks thinking its own way, and its template says which (read from the
template's text, never the model's name):

==================  ===================================  =============================  ==========================
family              thinking                             then the answer                on/off variable
==================  ===================================  =============================  ==========================
``<think>``         ``<think>`` … ``</think>``            text                           ``enable_thinking``
                    (Qwen3/3.5/3.6, QwQ, DeepSeek R1, GLM, SmolLM3, Nemotron, Kimi …)
Gemma 4             ``<|channel>thought`` … ``<channel|>``  text                           ``enable_thinking``
GPT-OSS (harmony)   ``<|channel|>analysis<|message|>`` …  ``<|start|>assistant<|channel|>``  (always thinks; effort
                    ``<|end|>``                           ``final<|message|>`` text        ``reasoning_effort``)
MiniMax M3          ``<mm:think>`` … ``</mm:think>``      text                           ``thinking_mode``
Cohere2MoE          ``<|START_THINKING|>`` …              text (``<|START_TEXT|>`` …)      ``reasoning``
                    ``<|END_THINKING|>``
Hy3                 ``<think:opensource>`` …              text                           ``reasoning_effort``
                    ``</think:opensource>``
==================  ===================================  =============================  ==========================

Whether a given reply starts inside a thinking block is read from the rendered prompt
itself, not guessed: Qwen3.5's generation prompt ends with ``<think>\\n`` (thinking on) or
``<think>\\n\\n</think>\\n\\n`` (``enable_thinking: false``), so the reply is thinking
exactly when the prompt's last start marker is not closed. A model whose prompt does not
open the block may still open it itself; the reply parser (:mod:`engine.runtime.prompt.reply`)
takes a leading start marker as thinking. The APIs turn thinking on and off with
``enable_thinking``; :meth:`Thinking.template_values` says it in the family's own variable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

START = "<think>"
END = "</think>"


@dataclass(frozen=True)
class Thinking:
    """A template's thinking markers and how it is turned on and off."""

    start: str = START
    end: str = END
    #: the template can be told to think or not (the Think toggle works)
    toggle: bool = False
    #: the template variable that does it, and its values for on and off
    variable: str = "enable_thinking"
    on: object = True
    off: object = False
    #: headers that introduce the answer after thinking (dropped, never content)
    answer_headers: tuple[str, ...] = ()
    #: markers around the answer itself (dropped, never content)
    answer_markers: tuple[str, ...] = ()
    #: headers that open thinking again after it ended (harmony's second analysis message)
    again: tuple[str, ...] = ()

    def opens(self, prompt_text: str) -> bool:
        """The rendered prompt leaves a think block open: the reply starts thinking."""
        i = prompt_text.rfind(self.start)
        return i >= 0 and self.end not in prompt_text[i:] and not prompt_text[i + len(self.start) :].strip()

    def template_values(self, extra: dict | None) -> dict | None:
        """A request's template values with ``enable_thinking`` also said in this family's
        own variable (unless the request set that one itself)."""
        if not extra or "enable_thinking" not in extra or self.variable == "enable_thinking" or self.variable in extra:
            return extra
        return {**extra, self.variable: self.on if extra["enable_thinking"] else self.off}


@dataclass(frozen=True)
class _Family:
    evidence: tuple[str, ...]  # text the template holds, all of it
    thinking: Thinking


#: the families, most telling first (a template may hold another family's markers in text)
_FAMILIES = (
    _Family(
        ("<|channel|>analysis", "<|message|>"),
        Thinking(
            "<|channel|>analysis<|message|>",
            "<|end|>",
            toggle=False,
            variable="reasoning_effort",
            on="medium",
            off="low",
            answer_headers=("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"),
            again=("<|start|>assistant<|channel|>analysis<|message|>", "<|channel|>analysis<|message|>"),
        ),
    ),
    _Family(("<|channel>", "<channel|>"), Thinking("<|channel>thought", "<channel|>")),
    _Family(
        ("<|open|>", "<|sep|>", "<|close|>", "think"),
        Thinking(
            "<|open|>think<|sep|>",
            "<|close|>think<|sep|><|open|>response<|sep|>",
            variable="thinking",
            answer_markers=("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>"),
        ),
    ),
    _Family(
        ("<mm:think>", "</mm:think>"),
        Thinking("<mm:think>", "</mm:think>", variable="thinking_mode", on="enabled", off="disabled"),
    ),
    _Family(
        ("<|START_THINKING|>", "<|END_THINKING|>"),
        Thinking(
            "<|START_THINKING|>",
            "<|END_THINKING|>",
            variable="reasoning",
            answer_markers=("<|START_TEXT|>", "<|END_TEXT|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"),
        ),
    ),
    _Family(
        ("<think{}>", ":opensource"),
        Thinking("<think:opensource>", "</think:opensource>", variable="reasoning_effort", on="high", off="no_think"),
    ),
)


def detect(template: str | None) -> Thinking | None:
    """The thinking markers of a template that thinks (None: it does not)."""
    if not template:
        return None
    for fam in _FAMILIES:
        if all(e in template for e in fam.evidence):
            t = fam.thinking
            # a reasoning effort turns thinking off only where it has a "no thinking" level
            named = re.search(rf"\b{re.escape(t.variable)}\b", template) is not None
            return replace(t, toggle=named and (t.variable != "reasoning_effort" or "no_think" in template))
    if END not in template:
        return None
    return Thinking(toggle=re.search(r"\benable_thinking\b", template) is not None)
