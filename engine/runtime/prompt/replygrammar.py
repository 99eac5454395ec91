"""One grammar for a whole reply: thinking, then the answer or tool calls.

llama.cpp applies a request's grammar from the first token, so a thinking model under
``response_format`` must think in JSON (llama.cpp #22537); vLLM skips the grammar when
thinking ends inside a speculative window (vLLM #36138). Here the reply's grammar covers
the thinking too, so it holds on every token, drafted or not:

* thinking (when the prompt left a think block open): free text up to the template's end
  marker; with a thinking budget, at most that many tokens, after which the grammar
  forces the end marker (forced tokens are free drafts in a speculative round);
* then the answer: free text, or the request's own constraint (``response_format``,
  ``grammar`` …), or tool calls: from the first token under ``tool_choice`` ``required``
  or a named tool, or (``auto``) free text until the format's opening marker, after which
  the call must name an allowed tool with arguments matching its schema.

Returns None when nothing constrains the reply (no budget, no constraint, no tools).
"""

from __future__ import annotations

import json
import re

from engine.runtime.decode.grammar import GrammarSpec, compile_grammar
from engine.runtime.prompt.calls import Lit, ToolFormat, text_lit
from engine.runtime.prompt.calls.base import upto
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.tools import Tool, ToolChoice

_TEXT = "/(?s:.*)/"


def reply_grammar(
    *,
    lit: Lit,
    thinking: Thinking | None = None,
    budget: int | None = None,
    answer: GrammarSpec | None = None,
    fmt: ToolFormat | None = None,
    tools: tuple[Tool, ...] = (),
    choice: ToolChoice | None = None,
    parallel: bool = True,
    may_open: Thinking | None = None,
) -> GrammarSpec | None:
    """The reply's grammar (see the module). ``thinking`` is given only when the reply
    starts inside a think block; ``may_open``, when it does not but the model may open one
    itself (Qwen3, Gemma 4, harmony's analysis channel): with a ``budget``, that block is
    bounded too."""
    allowed = choice.allowed(tools) if (choice is not None and fmt is not None) else ()
    # a block the model may open itself is admitted wherever the reply is constrained (a
    # forced call must not forbid the thinking before it) and bounded by a budget
    constrained = budget is not None or answer is not None or bool(allowed)
    opening = may_open if (thinking is None and may_open is not None and constrained) else None
    if thinking is None and opening is None and not allowed:
        return answer  # the request's own constraint, if any, from the first token
    if thinking is not None and budget is None and answer is None and not allowed:
        return None
    extra: list[dict] = []
    # whitespace between the parts, bounded: a model cannot pad a reply forever
    rules = ["WS: /[ \\t\\r\\n]{0,3}/"]
    if opening is not None and not lit(opening.start).startswith("<["):
        # text that opens no think block: the block, when the model opens one, is the budget's
        rules.append(f"TEXT: {_TEXT} & ~/{_regex_text(opening.start)}(?s:.*)/")
    else:
        rules.append(f"TEXT: {_TEXT}")
    if answer is not None:
        extra = _named(answer, "answer")
        plain = "@answer"
    else:
        plain = "TEXT"
    if allowed:
        assert fmt is not None and choice is not None
        rules.append(fmt.body(allowed, parallel, lit).strip())
        opener = lit(fmt.trigger) if fmt.trigger else ""
        if choice.must_call:
            rules.append(f"reply: {opener} call_body WS")
        elif not fmt.trigger:  # JSON calls: a reply is either a call or does not start with "{"
            rules.append(f"reply: {plain if answer is not None else 'NOT_JSON'} | call_body WS")
            rules.append("NOT_JSON: /([^{\\s](?s:.*))?/")
        elif answer is not None:
            rules.append(f"reply: @answer | {opener} call_body WS")
        elif opener.startswith("<["):  # a special token opens the calls
            rules.append(f"reply: TEXT | TEXT {opener} call_body WS")
        else:  # free text up to the opening marker (lazy), then the call
            rules.extend(upto("call_hd", opener))  # (text, then a special token: DSML's)
            rules.append("reply: TEXT | call_hd call_body WS")
    else:
        rules.append(f"reply: {plain}")
    think = thinking or opening
    if think is not None:
        end = lit(think.end)
        if end.startswith("<["):
            rules.append(f"THINK_TEXT: {_TEXT}")
        else:
            rules.append(f"THINK_TEXT: {_TEXT} & ~/(?s:.*){_regex_text(think.end)}(?s:.*)/")
        rules.append(f"think_text{f'[max_tokens={budget}]' if budget is not None else ''}: THINK_TEXT")
        if opening is not None:
            rules.append(f"start: {lit(opening.start)} think_text {end} WS reply | reply")
        else:
            rules.append(f"start: think_text {end} WS reply")
    else:
        rules.append("start: reply")
    top = "\n".join(rules) + "\n"
    grammars = [{"name": "reply", "lark_grammar": top}, *extra]
    return GrammarSpec(
        "llguidance",
        json.dumps({"grammars": grammars}, ensure_ascii=False),
        answer.param if answer is not None else "tools",
    )


def _regex_text(text: str) -> str:
    """``text`` matched literally inside a Lark ``/.../`` regex."""
    return re.escape(text).replace("/", "\\/")


def _named(spec: GrammarSpec, name: str) -> list[dict]:
    """``spec``'s compiled grammars with the first one named ``name``."""
    compiled = compile_grammar(spec)
    if compiled.lstrip().startswith("{"):
        grammars = json.loads(compiled)["grammars"]
    else:
        grammars = [{"lark_grammar": compiled}]
    return [{**grammars[0], "name": name}, *grammars[1:]]


__all__ = ["reply_grammar", "text_lit"]
