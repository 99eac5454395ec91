"""Thinking models: which templates think, and where a reply's thinking ends.

A template thinks when it writes ``<think>`` blocks (Qwen3/3.5/3.6, QwQ, DeepSeek R1,
GLM, SmolLM3, Nemotron …). Whether a given reply starts inside one is read from the
rendered prompt itself, not guessed: Qwen3.5's generation prompt ends with ``<think>\\n``
(thinking on) or ``<think>\\n\\n</think>\\n\\n`` (``enable_thinking: false``), so the reply
is thinking exactly when the prompt's last ``<think>`` is not closed. A model whose prompt
does not open the block may still open it itself; the reply parser
(:mod:`engine.runtime.prompt.reply`) takes a leading ``<think>`` as thinking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

START = "<think>"
END = "</think>"


@dataclass(frozen=True)
class Thinking:
    """A template's thinking markers and whether it takes ``enable_thinking``."""

    start: str = START
    end: str = END
    #: the template reads ``enable_thinking`` (the Think toggle works)
    toggle: bool = False

    def opens(self, prompt_text: str) -> bool:
        """The rendered prompt leaves a think block open: the reply starts thinking."""
        i = prompt_text.rfind(self.start)
        return i >= 0 and self.end not in prompt_text[i:] and not prompt_text[i + len(self.start) :].strip()


def detect(template: str | None) -> Thinking | None:
    """The thinking markers of a template that writes ``<think>`` blocks (None: it does
    not think)."""
    if not template or END not in template:
        return None
    return Thinking(toggle=re.search(r"\benable_thinking\b", template) is not None)
