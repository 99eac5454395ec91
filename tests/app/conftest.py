"""A real window over a real engine, offscreen, per test (settings in a temp file)."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.load.loader import LoadSpec, MtpSource


@pytest.fixture
def settings_path(tmp_path):
    return tmp_path / "settings.json"


@pytest.fixture
def window(qtbot, settings_path, monkeypatch, tmp_path):
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    from app.main import build_app

    app, win, ctx = build_app(settings_path=settings_path)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
    ctx.bridge.engine.stop()


def load(qtbot, win, path, source: str = "auto", head=None):
    """Load a model through the window's controller and wait for it."""
    with qtbot.waitSignal(win.models.loaded, timeout=30000):
        win.models.load(path, head, source)
    return win.models.current


def wait_idle(qtbot, chat, timeout: int = 30000):
    qtbot.waitUntil(lambda: chat.job is None, timeout=timeout)


__all__ = ["load", "wait_idle", "J", "LoadSpec", "MtpSource"]
