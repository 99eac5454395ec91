"""A chat request's prompt text: its conversation rendered by the model's template, with
the request's tools and template arguments, and how the reply will be split.

The template's facts were found when the model loaded (its call format and thinking
markers: ``ChatTemplate.calls``/``thinking``); here they are applied to one conversation.
The tool turns are put in the template's own terms (:mod:`engine.runtime.prompt.toolturns`),
whether the reply starts thinking is read from the rendered text
(:meth:`~engine.runtime.prompt.reasoning.Thinking.opens`), and, where prompt-cache
snapshots are taken, the text offsets worth one (:mod:`engine.runtime.prompt.cachepoints`).
What the request asks is decided before (:func:`engine.runtime.decider.resolve`); this
module only applies it. Runs on whichever thread prepares the request.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import InvalidRequestError
from engine.runtime.llama.model import Model
from engine.runtime.prompt import cachepoints, toolturns
from engine.runtime.prompt.calls import ToolFormat
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import ReplyParser
from engine.runtime.prompt.templates import ChatTemplate
from engine.runtime.prompt.tools import Tool, ToolChoice


@dataclass(frozen=True)
class ReplyPlan:
    """How a chat reply is split into thinking, content and tool calls."""

    #: the template's thinking markers (None: no split, or ``reasoning_format: none``)
    thinking: Thinking | None = None
    #: the prompt left a think block open: the reply starts thinking
    in_thinking: bool = False
    #: the call format to parse (None: no tools offered, or tool_choice none)
    fmt: ToolFormat | None = None
    tools: tuple[Tool, ...] = ()

    def parser(self) -> ReplyParser | None:
        if self.thinking is None and self.fmt is None:
            return None
        return ReplyParser(self.thinking, self.in_thinking, self.fmt, self.tools)


@dataclass(frozen=True)
class RenderedChat:
    """A conversation's prompt text and what it tells about the reply."""

    text: str
    plan: ReplyPlan
    #: the template's thinking markers when the prompt leaves a think block open
    thinking: Thinking | None
    #: the markers of a thinking template whose prompt neither opens nor closes the block:
    #: the model may open it itself (a thinking budget bounds it there too)
    may_open: Thinking | None
    #: text offsets worth a prompt-cache snapshot (empty unless asked for)
    offsets: tuple[int, ...] = ()


def render_chat(
    template: ChatTemplate,
    model: Model,
    messages: list[dict],
    *,
    tools: tuple[Tool, ...],
    choice: ToolChoice,
    extra: dict | None,
    split_thinking: bool,
    points: bool,
) -> RenderedChat:
    """``messages`` (normalized) rendered by ``template`` with the generation prompt.

    ``tools`` are offered unless ``choice`` is none; ``extra``: the request's template
    arguments; ``split_thinking``: the reply's thinking is parsed apart from its content
    (``reasoning_format: auto``); ``points``: find the text offsets worth a snapshot."""
    offered = tools if choice.mode != "none" else ()
    msgs, tool_list, fmt = toolturns.conversation(template.calls, messages, offered)

    def render(conversation: list[dict], add_generation_prompt: bool = True) -> str:
        return template.render(
            conversation,
            add_generation_prompt=add_generation_prompt,
            bos_token=model.token_text(model.bos) if model.add_bos and model.bos >= 0 else "",
            eos_token=model.token_text(model.eos) if model.eos >= 0 else "",
            tools=tool_list,
            extra=extra,
        )

    text, msgs = _render_fitted(render, msgs)
    markers = template.thinking
    in_thinking = markers is not None and markers.opens(text)
    plan = ReplyPlan(markers if split_thinking else None, in_thinking, fmt, tools)
    offsets: list[int] = []
    if points:
        # what a rendering for these arguments and tools tells is kept with the template
        key = (repr(sorted((extra or {}).items())), repr(tool_list))
        offsets = cachepoints.text_points(render, msgs, text, template.points, key)
    opens_itself = markers is not None and not in_thinking and not text.rstrip().endswith(markers.end)
    return RenderedChat(
        text,
        plan,
        thinking=markers if in_thinking else None,
        may_open=markers if opens_itself else None,
        offsets=tuple(offsets),
    )


def _render_fitted(render: cachepoints.Render, messages: list[dict]) -> tuple[str, list[dict]]:
    """The rendered text and the messages it was rendered from.

    Agents send several system messages (Codex: instructions, then a developer message;
    pydantic-ai's retry prompt mid-conversation), which many templates refuse (Qwen3.5:
    "System message must be at the beginning"): the leading ones are then merged into one
    and later ones given as user turns, and only if the template still refuses is it the
    request's 400."""
    try:
        return render(messages), messages
    except InvalidRequestError:
        folded = toolturns.fit_system_messages(messages)
        if folded == messages:
            raise
        return render(folded), folded
