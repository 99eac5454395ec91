"""How a model writes tool calls: the registry of call-format families, one module each
with its detection rule, a parser for replies, a writer (for tests and the generic
prompt) and the grammar that constrains calls (the interface is :mod:`.base`, calls as
far as they are written in :mod:`.partial`). The families whose arguments are JSON are in
:mod:`.jsoncalls`, those that write them as parameters in :mod:`.paramcalls`. A family is
added by adding a module and listing its formats in :data:`FORMATS`.

The family is detected from the chat template's own text (:func:`detect`), never from the
model's name:

=================  =====================================================================
family             a call as the model writes it
=================  =====================================================================
``qwen-xml``       ``<tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>``
                   (Qwen3.5/3.6, Qwen3-Coder, Nemotron 3, StepFun; Seed-OSS with ``<seed:tool_call>``)
``hermes``         ``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>``
                   (Qwen2.5/3, QwQ, Hermes, Granite 4 …)
``llama3``         ``{"name": NAME, "parameters": {...}}``, optionally after ``<|python_tag|>``
``mistral``        ``[TOOL_CALLS][{"name": NAME, "arguments": {...}}]`` (Nemo)
``mistral-args``   ``[TOOL_CALLS]NAME[ARGS]{...}`` (Small 3.2, Ministral 3, Devstral)
``deepseek``       ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}``
                   ``<｜tool▁call▁end｜><｜tool▁calls▁end｜>`` (V3.1)
``deepseek-r1``    the same with ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```\\n`` (R1 and its distills)
``function-tag``   ``<function=NAME>{...}</function>`` (Functionary v3.1)
``generic``        ``{"tool_call": {"name": NAME, "arguments": {...}}}``: templates with no
                   call format of their own; the tools are described in a system message
=================  =====================================================================

XML parameters are typed through the tool's JSON schema: a string parameter is taken as
written, any other is JSON. A reply whose calls do not parse is content, never an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the families are imported in this order, which orders the control markers in every
# format's ``markers`` (their order matters to no one: they are used as a set)
from engine.runtime.prompt.calls.base import Lit, ToolFormat, text_lit
from engine.runtime.prompt.calls.paramcalls.qwenxml import QWEN_XML, SEED_XML, QwenXml
from engine.runtime.prompt.calls.jsoncalls.hermes import HERMES, Hermes
from engine.runtime.prompt.calls.jsoncalls.llama3 import LLAMA3, Llama3
from engine.runtime.prompt.calls.jsoncalls.mistral import MISTRAL, MISTRAL_ARGS, Mistral, MistralArgs
from engine.runtime.prompt.calls.jsoncalls.deepseek import DEEPSEEK, DEEPSEEK_MARKERS, DEEPSEEK_R1, DeepSeek
from engine.runtime.prompt.calls.jsoncalls.functiontag import FUNCTION_TAG, FunctionTag
from engine.runtime.prompt.calls.paramcalls.glm import GLM, GLM47, LING, Glm
from engine.runtime.prompt.calls.paramcalls.hy3 import HY3, Hy3
from engine.runtime.prompt.calls.paramcalls.gemma4 import GEMMA4, Gemma4
from engine.runtime.prompt.calls.jsoncalls.harmony import HARMONY, Harmony
from engine.runtime.prompt.calls.jsoncalls.kimi import KIMI, KIMI_K3, Kimi, KimiK3
from engine.runtime.prompt.calls.jsoncalls.cohere import COHERE, Cohere
from engine.runtime.prompt.calls.jsoncalls.nemotron import NEMOTRON, Nemotron
from engine.runtime.prompt.calls.paramcalls.dsml import DSML_V32, DSML_V4, Dsml
from engine.runtime.prompt.calls.paramcalls.minimax import (
    MINIMAX,
    MINIMAX_M1,
    MINIMAX_M3,
    MiniMax,
    MiniMaxM1,
    MiniMaxM3,
)
from engine.runtime.prompt.calls.jsoncalls.generic import GENERIC, Generic

#: every format, in the order :func:`detect` asks them: a template can hold more than one
#: family's markers (Qwen3.5's XML calls sit in ``<tool_call>`` like Hermes', Functionary
#: v3.1 is a Llama 3.1 template), so the more telling come first and a rule may count on
#: those before it having said no; GENERIC, which takes any template, is last
FORMATS: tuple[ToolFormat, ...] = (
    QWEN_XML,
    SEED_XML,
    FUNCTION_TAG,
    DEEPSEEK,
    DEEPSEEK_R1,
    MISTRAL,
    MISTRAL_ARGS,
    GLM,
    GLM47,
    LING,
    HY3,
    GEMMA4,
    HARMONY,
    KIMI,
    COHERE,
    NEMOTRON,
    DSML_V32,
    DSML_V4,
    MINIMAX,
    MINIMAX_M3,
    MINIMAX_M1,
    KIMI_K3,
    HERMES,
    LLAMA3,
    GENERIC,
)


@dataclass(frozen=True)
class Detected:
    format: ToolFormat
    #: the template describes ``tools`` itself (else a system message describes them)
    describes_tools: bool

    @property
    def knows_calls(self) -> bool:
        """The template writes earlier calls and tool results in its own format."""
        return self.format is not GENERIC or self.describes_tools


def renders_tools(template: str | None) -> bool:
    return bool(template) and re.search(r"\btools\b", template) is not None  # type: ignore[arg-type]


def detect(template: str | None) -> Detected:
    """The call format a chat template teaches, from its own markers: the first in
    :data:`FORMATS` whose rule holds."""
    t = template or ""
    return Detected(next(f for f in FORMATS if f.detects(t)), renders_tools(t))


__all__ = [
    "DEEPSEEK",
    "DEEPSEEK_MARKERS",
    "DEEPSEEK_R1",
    "FORMATS",
    "FUNCTION_TAG",
    "GENERIC",
    "GLM",
    "GLM47",
    "HERMES",
    "HY3",
    "LING",
    "LLAMA3",
    "MISTRAL",
    "Glm",
    "Hy3",
    "GEMMA4",
    "HARMONY",
    "KIMI",
    "COHERE",
    "NEMOTRON",
    "Gemma4",
    "Harmony",
    "Kimi",
    "Cohere",
    "Nemotron",
    "DSML_V32",
    "DSML_V4",
    "Dsml",
    "MINIMAX",
    "MINIMAX_M3",
    "MiniMax",
    "MiniMaxM3",
    "KIMI_K3",
    "KimiK3",
    "MINIMAX_M1",
    "MiniMaxM1",
    "MISTRAL_ARGS",
    "QWEN_XML",
    "SEED_XML",
    "DeepSeek",
    "Detected",
    "FunctionTag",
    "Generic",
    "Hermes",
    "Lit",
    "Llama3",
    "Mistral",
    "MistralArgs",
    "QwenXml",
    "ToolFormat",
    "detect",
    "renders_tools",
    "text_lit",
]
