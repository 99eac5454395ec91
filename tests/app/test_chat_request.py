"""What the chat page asks the engine for: its preferences are the reply's layer of
defaults (``Generate.defaults``), under the reply's own values and over the engine's.

The page's jobs go to the seam of :mod:`tests.app.test_chat_reasoning` (recorded, not
run) and are decided by the app's own engine, as it would decide them when queued."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.decider import INTERACTIVE
from tests.app.test_chat_reasoning import Seam, send


@pytest.fixture
def chat(window, monkeypatch, qtbot):
    page = window.pages["chat"]
    page.seam = Seam(qtbot, window.ctx.bridge)
    monkeypatch.setattr(window.ctx.bridge, "run", page.seam.run)
    window.show_page("chat")
    return page


def _reply(qtbot, chat, text: str) -> J.Generate:
    """Send ``text`` and end its reply at once: the job the page submitted."""
    send(qtbot, chat, text)
    chat.seam.finish(chat, "ok", None)
    return chat.seam.jobs[-1]


def test_preferences_left_unset_let_the_engines_defaults_through(qtbot, window, chat):
    prefs, engine = window.ctx.settings.chat, window.ctx.bridge.engine
    prefs.max_tokens = prefs.thinking_budget = 0  # unset
    job = _reply(qtbot, chat, "Hello")
    # the preferences travel as a layer: the reply's own values say only what it asks
    assert job.defaults is not None and job.max_tokens is None and job.temperature is None
    decided = engine.resolve(job)
    assert decided.max_tokens == INTERACTIVE.max_tokens == 1024 and decided.thinking_budget is None
    assert decided.suffix_drafts is prefs.suffix_drafts and decided.draft_depth == chat.controls.draft_depth()


def test_preferences_set_are_the_replys_defaults(qtbot, window, chat):
    prefs, engine = window.ctx.settings.chat, window.ctx.bridge.engine
    prefs.max_tokens, prefs.thinking_budget = 77, 12
    chat.controls.temperature.setValue(0.6)
    decided = engine.resolve(_reply(qtbot, chat, "Hello"))
    assert (decided.max_tokens, decided.thinking_budget, decided.temperature) == (77, 12, 0.6)
    prefs.max_tokens = 0  # unset again: the engine's once more
    assert engine.resolve(_reply(qtbot, chat, "Again")).max_tokens == INTERACTIVE.max_tokens
