"""The chat page with thinking models and tool calls: the thinking block, Markdown with
copyable code, tool-call cards and the Think box.

The page's jobs go to a seam instead of the engine: each J.Generate it submits is
recorded, and the test feeds that job's events (J.Tokens with parts, J.Done with a
J.GenerateResult) through the real bridge, as the engine thread would."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from PySide6.QtCore import QPoint, Qt, QUrl
from PySide6.QtGui import QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication

from app.bridge import JobSignals
from app.markdown import mono_family
from engine.runtime import jobs as J
from engine.runtime.decode.stats import GenerationStats
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.prompt.reply import Part, Reply
from engine.runtime.prompt.tools import ToolCall

THINKER = ModelInfo(
    name="thinker",
    path="thinker.gguf",
    mtp="integrated",
    n_ctx=4096,
    chat_template="the model's own",
    thinks=True,
    think_toggle=True,
    tool_format="hermes",
)


class Handle:
    _ids = itertools.count(10_000)

    def __init__(self, job):
        self.id, self.job, self.cancelled = next(self._ids), job, False

    def cancel(self) -> None:
        self.cancelled = True


class Seam:
    """Stands in for the engine behind ``bridge.run``: jobs are recorded, events fed."""

    def __init__(self, qtbot, bridge):
        self.qtbot, self.bridge, self.jobs, self.handles = qtbot, bridge, [], []

    def run(self, job) -> JobSignals:
        h = Handle(job)
        signals = JobSignals(h, self.bridge)
        self.bridge._jobs[h.id] = signals
        self.jobs.append(job)
        self.handles.append(h)
        self.bridge._observe(h, J.Started(h.id))
        return signals

    def feed(self, *events) -> None:
        """The last job's events, through the bridge's buffer, then drained."""
        for ev in events:
            self.bridge._observe(self.handles[-1], ev)
        self.qtbot.waitUntil(lambda: not self.bridge._pending and not self.bridge._scheduled, timeout=5000)

    def finish(self, chat, text: str, reply: Reply | None, n: int = 10, thinking_tokens: int = 0) -> None:
        stats = GenerationStats(generated=n, generation_ms=100.0, thinking_tokens=thinking_tokens)
        self.feed(J.Done(J.GenerateResult(list(range(n)), text, stats, "thinker", 5, None, reply)))
        self.qtbot.waitUntil(lambda: chat.job is None, timeout=5000)


@pytest.fixture
def chat(window, monkeypatch, qtbot):
    page = window.pages["chat"]
    page.seam = Seam(qtbot, window.ctx.bridge)
    monkeypatch.setattr(window.ctx.bridge, "run", page.seam.run)
    window.show_page("chat")
    return page


def tokens(n: int, *parts: Part) -> J.Tokens:
    return J.Tokens(tuple(range(n)), "".join(p.text for p in parts), None, tuple(parts))


def send(qtbot, chat, text: str) -> None:
    chat.input.setPlainText(text)
    qtbot.mouseClick(chat.send_btn, Qt.MouseButton.LeftButton)
    assert chat.job is not None


def text_of(chat) -> str:
    return chat.transcript.toPlainText()


def click_text(qtbot, chat, needle: str) -> None:
    """A real mouse click on the transcript's text ``needle`` (a link)."""
    found = chat.transcript.document().find(needle)
    assert not found.isNull(), needle
    cursor = QTextCursor(chat.transcript.document())
    cursor.setPosition(found.selectionStart() + 1)
    chat.transcript.setTextCursor(cursor)
    chat.transcript.ensureCursorVisible()
    point: QPoint = chat.transcript.cursorRect(cursor).center()
    qtbot.mouseClick(chat.transcript.viewport(), Qt.MouseButton.LeftButton, pos=point)


def in_code_font(fmt) -> bool:
    """Set in the system's fixed-width font, the one the app asks Qt for. Not whether Qt
    calls the font fixed-pitch: that depends on the machine's fonts (Qt says no to Noto
    Sans Mono, a common desktop "monospace")."""
    font = fmt.font()
    return mono_family() in (font.families() or [font.family()])


def format_at(chat, needle: str):
    found = chat.transcript.document().find(needle)
    assert not found.isNull(), needle
    cursor = QTextCursor(chat.transcript.document())
    cursor.setPosition(found.selectionStart() + 1)
    return cursor.charFormat()


# --------------------------------------------------------------------- thinking
def test_thinking_streams_into_its_block_then_folds_behind_a_header(qtbot, chat):
    chat._on_model_loaded(THINKER)
    send(qtbot, chat, "What is 2+2?")
    chat.seam.feed(tokens(3, Part("reasoning", "The user adds two")), tokens(4, Part("reasoning", " and two: four.")))
    qtbot.waitUntil(lambda: "Thinking… 7 tokens" in text_of(chat), timeout=5000)
    assert "The user adds two and two: four." in text_of(chat)  # shown live, in the thinking block
    chat.seam.feed(tokens(2, Part("content", "It is **4**.")))
    qtbot.waitUntil(lambda: "It is 4." in text_of(chat), timeout=5000)
    assert "Thinking…" not in text_of(chat) and "Thought for 7 tokens" in text_of(chat)

    reasoning = "The user adds two and two: four."
    chat.seam.finish(
        chat,
        "<think>\n" + reasoning + "\n</think>\n\nIt is **4**.",
        Reply(reasoning, "It is **4**."),
        thinking_tokens=8,
    )
    saved = chat.conv.messages[-1]
    assert saved["content"] == "It is **4**." and saved["reasoning"] == reasoning
    assert saved["stats"]["thinking_tokens"] == 8  # the engine's count (with </think>) wins
    shown = text_of(chat)
    assert "<think>" not in shown and "</think>" not in shown
    assert "▸ Thought for 8 tokens, " in shown and shown.rstrip().endswith("It is 4.")
    assert reasoning not in shown  # folded by default
    click_text(qtbot, chat, "Thought for 8 tokens")  # open it
    qtbot.waitUntil(lambda: reasoning in text_of(chat), timeout=5000)
    assert "▾ Thought for 8 tokens" in text_of(chat)
    assert text_of(chat).index(reasoning) < text_of(chat).index("It is 4.")  # above the answer
    click_text(qtbot, chat, "Thought for 8 tokens")  # and close it again
    qtbot.waitUntil(lambda: reasoning not in text_of(chat), timeout=5000)


def test_a_reply_the_engine_did_not_split_is_all_answer(qtbot, chat):
    """Tokens without parts (a template that does not think, no tools): the engine did not
    split the reply, so all of it is the answer, as the endpoint sends it as content; the
    page splits nothing itself."""
    send(qtbot, chat, "Hi")
    raw = "<think>\nplanning a greeting\n</think>\n\nHello there"
    chat.seam.feed(J.Tokens((1, 2, 3), raw[:30]))  # parts None: the unsplit stream
    qtbot.waitUntil(lambda: "planning a greeting" in text_of(chat), timeout=5000)
    assert "Thinking…" not in text_of(chat)
    chat.seam.feed(J.Tokens((4, 5), raw[30:]))
    qtbot.waitUntil(lambda: "Hello there" in text_of(chat), timeout=5000)
    chat.seam.finish(chat, raw, None)
    shown = text_of(chat)
    assert "Thought" not in shown and "planning a greeting" in shown and shown.rstrip().endswith("Hello there")
    saved = chat.conv.messages[-1]
    assert saved["content"] == raw and "reasoning" not in saved and "thinking_tokens" not in saved["stats"]


# --------------------------------------------------------------------- markdown
def test_markdown_reply_with_a_monospace_code_block_and_a_copy_link(qtbot, chat):
    send(qtbot, chat, "Show me <i>code</i> & more")
    code = "def add(a, b):\n    return a + b  # <not a tag>\n\nprint(add(2, 2))"
    answer = f"Here is **bold** text and <b>raw html</b>.\n\n```python\n{code}\n```\n\nDone."
    chat.seam.feed(tokens(20, Part("content", answer)))
    chat.seam.finish(chat, answer, Reply("", answer))
    shown = text_of(chat)
    assert "Show me <i>code</i> & more" in shown  # the user's text is text
    assert "<b>raw html</b>" in shown and "**" not in shown and "```" not in shown
    assert format_at(chat, "bold").fontWeight() >= 600
    assert in_code_font(format_at(chat, "return a + b"))
    assert not in_code_font(format_at(chat, "Done."))
    assert format_at(chat, "Copy").anchorHref() == "copy:0"
    QApplication.clipboard().setText("something else")
    click_text(qtbot, chat, "Copy")
    qtbot.waitUntil(lambda: QApplication.clipboard().text() == code, timeout=5000)


def test_code_blocks_of_older_messages_keep_their_own_copy_links(qtbot, chat):
    for i, word in enumerate(["first", "second"]):
        send(qtbot, chat, f"code {i}")
        answer = f"```\n{word}()\n```"
        chat.seam.finish(chat, answer, None)
    assert format_at(chat, "second()").anchorHref() == ""  # code, not the link
    chat.transcript.anchorClicked.emit(QUrl("copy:1"))
    assert QApplication.clipboard().text() == "second()"
    click_text(qtbot, chat, "Copy")  # the first Copy in the transcript: the first reply's block
    qtbot.waitUntil(lambda: QApplication.clipboard().text() == "first()", timeout=5000)


# ------------------------------------------------------------------- tool calls
def test_tool_calls_show_as_cards_with_pretty_arguments(qtbot, chat):
    send(qtbot, chat, "Weather in Paris?")
    call = ToolCall("get_weather", '{"city": "Paris", "days": [1, 2]}', "call_7")
    chat.seam.feed(tokens(5, Part("content", "Let me look.")), tokens(9, Part("call", call=call, index=0)))
    qtbot.waitUntil(lambda: "get_weather" in text_of(chat), timeout=5000)
    chat.seam.finish(chat, "Let me look.<tool_call>…", Reply("", "Let me look.", [call]))
    shown = text_of(chat)
    assert "Tool call" in shown and "get_weather" in shown
    assert '"city": "Paris",' in shown and '\n  "days": [\n    1,' in shown  # indented, one value a line
    assert "<tool_call>" not in shown
    assert chat.conv.messages[-1]["calls"] == [{"name": "get_weather", "arguments": call.arguments, "id": "call_7"}]
    assert in_code_font(format_at(chat, '"city"'))


# -------------------------------------------------------------------- Think box
def test_think_box_turns_thinking_off_per_chat(qtbot, chat):
    assert not chat.think_box.isEnabled()  # no model yet
    chat._on_model_loaded(replace(THINKER, think_toggle=False))  # thinks, but cannot be told not to
    assert not chat.think_box.isEnabled() and "always thinks" in chat.think_box.toolTip()
    chat.think_box.setChecked(False)
    send(qtbot, chat, "one")
    assert chat.seam.jobs[-1].chat_template_kwargs is None  # a disabled box changes nothing
    chat.seam.finish(chat, "ok", None)

    chat.think_box.setChecked(True)
    chat._on_model_loaded(THINKER)
    assert chat.think_box.isEnabled()
    send(qtbot, chat, "two")
    assert isinstance(chat.seam.jobs[-1], J.Generate) and chat.seam.jobs[-1].chat_template_kwargs is None
    chat.seam.finish(chat, "ok", None)
    qtbot.mouseClick(chat.think_box, Qt.MouseButton.LeftButton)  # untick
    assert not chat.think_box.isChecked()
    send(qtbot, chat, "three")
    assert chat.seam.jobs[-1].chat_template_kwargs == {"enable_thinking": False}
    chat.seam.finish(chat, "ok", None)
    assert chat.conv.sampling["think"] is False
    first = chat.conv.id
    chat.new_chat()
    chat.think_box.setChecked(True)
    send(qtbot, chat, "four")
    assert chat.seam.jobs[-1].chat_template_kwargs is None and "think" not in chat.conv.sampling
    chat.seam.finish(chat, "ok", None)
    row = next(i for i in range(chat.history.count()) if chat.history.item(i).data(Qt.ItemDataRole.UserRole) == first)
    chat.history.setCurrentRow(row)  # back to the first chat: thinking off again
    assert not chat.think_box.isChecked()
    saved = next(c for c in chat.ctx.chats.all() if c.id == first)
    assert saved.sampling["think"] is False  # kept with the chat on disk


def test_markdown_never_turns_reply_html_into_markup():
    from app.markdown import blocks, to_html

    codes: list[str] = []
    out = to_html('<img src="x" onerror="alert(1)"> <script>bad()</script>\n\n```js\n</pre><b>x</b>\n```', codes)
    assert "<img" not in out and "<script" not in out and "</pre><b>" not in out
    assert codes == ["</pre><b>x</b>"]
    doc = QTextDocument()
    doc.setHtml(out)
    assert '<img src="x" onerror="alert(1)">' in doc.toPlainText()
    assert blocks("a\n```py\nx = 1") == [("prose", "", "a"), ("code", "py", "x = 1")]  # still streaming


# ------------------------------------------------------- real engine, real template
@pytest.fixture(scope="module")
def qwen_thinker(qwen35_template_model):
    """A tiny model carrying Qwen3.5-4B's real chat template (thinks, takes enable_thinking)."""
    return qwen35_template_model


def test_a_real_thinking_template_through_the_engine_and_the_bridge(qtbot, window, qwen_thinker):
    from tests.app.conftest import load, wait_idle

    info = load(qtbot, window, qwen_thinker, "integrated")
    chat = window.pages["chat"]
    assert info.thinks and info.think_toggle and chat.think_box.isEnabled()
    window.ctx.settings.chat.max_tokens = 24  # the model never closes its think block in so few
    results = []
    chat.input.setPlainText("Think about it")
    chat.send()
    chat.job.finished.connect(lambda res, _cancelled: results.append(res))
    wait_idle(qtbot, chat, timeout=120000)  # llama.cpp on shared cores can be slow
    reply = results[-1].reply
    assert reply is not None and reply.reasoning and results[-1].stats.thinking_tokens > 0
    saved = chat.conv.messages[-1]
    assert saved["reasoning"] == reply.reasoning and saved["content"] == reply.content
    n = results[-1].stats.thinking_tokens
    assert saved["stats"]["thinking_tokens"] == n and f"Thought for {n} tokens" in text_of(chat)
    assert "<think>" not in text_of(chat) and reply.reasoning.strip() not in text_of(chat)  # folded
    # Think off: the template closes the block in the prompt, the whole reply is the answer
    chat.think_box.setChecked(False)
    chat.input.setPlainText("Now answer straight away")
    chat.send()
    assert chat.job.job.chat_template_kwargs == {"enable_thinking": False}
    chat.job.finished.connect(lambda res, _cancelled: results.append(res))
    wait_idle(qtbot, chat, timeout=120000)  # llama.cpp on shared cores can be slow
    assert results[-1].stats.thinking_tokens == 0 and not results[-1].reply.reasoning
    assert results[-1].reply.content and "reasoning" not in chat.conv.messages[-1]
