"""The chat page's live reply without Qt: fed the engine's parts and text as the bridge
emits them (a flush's parts just before its text), it holds the thinking, its token
count and time, the answer and the tool calls, and the message history keeps."""

from __future__ import annotations

import subprocess
import sys

from app.pages.chat.livereply import LiveReply
from engine.runtime.decode.stats import RoundStats
from engine.runtime.prompt.reply import CALL, CONTENT, REASONING, Part, Reply
from engine.runtime.prompt.tools import ToolCall


def feed(live: LiveReply, text: str, n: int, now: float, *parts: Part) -> None:
    live.add_parts(list(parts))
    live.add_text(text, n, now=now)


def test_thinking_then_the_answer_then_a_tool_call():
    live = LiveReply()
    feed(live, "<think>\nThe user adds", 3, 10.0, Part(REASONING, "The user adds"))
    assert live.thinking and live.header(now=10.0) == "Thinking… 3 tokens"
    feed(live, " two and two.\n</", 4, 11.0, Part(REASONING, " two and two."))  # "\n</" held back
    feed(live, "think", 1, 11.5)  # a flush whose text gives no part yet: still thinking
    assert live.thinking_tokens == 8 and live.thinking_s is None
    assert live.header(now=12.0) == "Thinking… 8 tokens, 4.0 tok/s"
    assert live.message() == {"content": "", "reasoning": "The user adds two and two.", "calls": []}

    feed(live, ">\n\nIt is **4**.", 5, 12.5, Part(CONTENT, "It is **4**."))
    assert not live.thinking and live.header() is None
    assert live.thinking_tokens == 8 and live.thinking_s == 2.5  # the answer started 2.5 s after the first text
    assert live.message()["stats"] == {"thinking_tokens": 8, "thinking_s": 2.5}
    call = ToolCall("add", '{"a": 2, "b": 2}', "call_1")
    feed(live, "<tool_call>…</tool_call>", 9, 13.0, Part(CALL, call=call, index=0))
    assert live.content == "It is **4**." and live.calls == [
        {"name": "add", "arguments": call.arguments, "id": "call_1"}
    ]
    assert live.tokens == 22 and live.text.startswith("<think>\nThe user adds two")

    # the engine's final split and count win (its count includes the </think> token)
    live.end(Reply("The user adds two and two.", "It is **4**.", [call]), "<think>…", thinking_tokens=9)
    saved = live.saved({"tokens": 22, "stopped": False}, now=14.0)
    assert saved == {
        "role": "assistant",
        "content": "It is **4**.",
        "stats": {"tokens": 22, "stopped": False, "thinking_tokens": 9, "thinking_s": 2.5},
        "reasoning": "The user adds two and two.",
        "calls": [{"name": "add", "arguments": call.arguments, "id": "call_1"}],
    }


def test_no_parts_means_all_of_it_is_the_answer():
    """The engine sends no parts when it does not split the reply (``Tokens.parts`` None:
    a template that does not think, no tools): nothing is taken for thinking."""
    live = LiveReply()
    live.add_text("<think>\nplanning", 3, now=1.0)
    assert not live.thinking and live.header() is None and live.thinking_tokens == 0
    live.add_text("\n</think>\n\nHello", 4, now=2.0)
    assert live.message() == {"content": "<think>\nplanning\n</think>\n\nHello", "reasoning": "", "calls": []}
    live.end(None, "<think>\nplanning\n</think>\n\nHello there")
    assert live.saved({"tokens": 8}) == {
        "role": "assistant",
        "content": "<think>\nplanning\n</think>\n\nHello there",
        "stats": {"tokens": 8},
    }


def test_a_reply_stopped_while_thinking_keeps_its_count_and_time():
    live = LiveReply()
    feed(live, "<think>\nHmm", 2, 5.0, Part(REASONING, "Hmm"))
    feed(live, " let me see", 3, 6.0, Part(REASONING, " let me see"))
    saved = live.saved({"stopped": True}, now=7.25)  # no result: the reply so far
    assert saved["reasoning"] == "Hmm let me see" and saved["content"] == ""
    assert saved["stats"] == {"stopped": True, "thinking_tokens": 5, "thinking_s": 2.25}


def test_rounds_give_the_live_rate():
    live = LiveReply()
    live.add_text("abcdef", 11, now=0.0)
    r = dict(depth=2, drafted=2, accepted=1, emitted=2, draft_settle_ms=1.0, verify_ms=2.0)
    live.add_rounds([RoundStats(index=0, t=0.5, **r), RoundStats(index=1, t=2.0, **r)])
    assert live.stats.rounds == 2 and live.stats.drafted == 4 and live.stats.accepted == 2
    assert live.rate == 5.0  # (11 - 1) tokens in 2 s: the first token comes with the prompt


def test_the_live_reply_does_not_import_qt():
    code = (
        "import sys, app.pages.chat.livereply; "
        "print(sorted(m for m in sys.modules if m.startswith(('PySide6', 'shiboken'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
