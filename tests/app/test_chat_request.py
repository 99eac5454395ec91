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
    assert prefs.suffix_drafts is None and decided.suffix_drafts is INTERACTIVE.suffix_drafts is True
    assert decided.draft_depth == chat.controls.draft_depth()


def test_preferences_set_are_the_replys_defaults(qtbot, window, chat):
    prefs, engine = window.ctx.settings.chat, window.ctx.bridge.engine
    prefs.max_tokens, prefs.thinking_budget = 77, 12
    chat.controls.temperature.setValue(0.6)
    decided = engine.resolve(_reply(qtbot, chat, "Hello"))
    assert (decided.max_tokens, decided.thinking_budget, decided.temperature) == (77, 12, 0.6)
    prefs.max_tokens = 0  # unset again: the engine's once more
    assert engine.resolve(_reply(qtbot, chat, "Again")).max_tokens == INTERACTIVE.max_tokens


def test_the_controls_show_the_engines_values_for_preferences_left_unset(qtbot, settings_path, monkeypatch, tmp_path):
    """No default is written twice: on an engine whose defaults differ from the built-in
    ones the controls show the engine's values, the preferences stay unset until the user
    sets one apart from the engine's, and setting it back unsets it again."""
    from app.main import build_app
    from engine.runtime.engine import Engine, EngineConfig

    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    engine = Engine(EngineConfig(request=J.Defaults(temperature=0.5, top_k=30, suffix_drafts=False))).start()
    _app, win, ctx = build_app(settings_path=settings_path, engine=engine)
    qtbot.addWidget(win)
    try:
        c, prefs = win.pages["chat"].controls, ctx.settings.chat
        assert (c.temperature.value(), c.top_k.value(), c.suffix_drafts.isChecked()) == (0.5, 30, False)
        assert (prefs.temperature, prefs.top_p, prefs.top_k, prefs.sampled_draft, prefs.suffix_drafts) == (None,) * 5
        c.temperature.setValue(0.9)
        c.suffix_drafts.setChecked(True)
        assert (prefs.temperature, prefs.suffix_drafts) == (0.9, True)
        c.temperature.setValue(0.5)
        assert prefs.temperature is None  # the engine's value again: unset, and it follows the engine
    finally:
        win.close()
        engine.stop()
