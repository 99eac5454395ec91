"""A desktop without a library Qt's X11 plugin needs: a sentence naming the package, not
Qt's abort. The plugin is loaded as Qt would load it."""

from __future__ import annotations

import subprocess
import sys

from app.displaycheck import describe, uses_xcb, xcb_problem


def test_the_app_names_what_to_install_where_the_x11_plugin_cannot_load(monkeypatch, tmp_path):
    """The app started as a user would, with Qt on X11. Where the plugin's libraries are all
    there the check is silent; where one is missing (this build machine lacks libxcb-icccm4)
    the app says which package to install and exits, before Qt's own abort ("no Qt platform
    plugin could be initialized")."""
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    assert uses_xcb()
    problem = xcb_problem()
    if problem is None:
        return  # every library is installed: nothing to say (Qt would open its window)
    env = {"QT_QPA_PLATFORM": "xcb", "MTP_STUDIO_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "app.launcher"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, **env},
    )
    assert proc.returncode == 1
    assert problem in proc.stderr and "sudo apt install" in proc.stderr
    assert "platform plugin could be initialized" not in proc.stderr


def test_no_check_where_qt_does_not_use_x11(monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert not uses_xcb() and xcb_problem() is None
    monkeypatch.delenv("QT_QPA_PLATFORM")
    monkeypatch.setenv("XDG_SESSION_TYPE", "wayland")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert not uses_xcb()


def test_a_missing_library_names_its_package():
    """The dynamic loader's own words, as ctypes raises them when libxcb-cursor0 (needed by
    Qt 6.5 and later) is not installed."""
    error = "libxcb-cursor.so.0: cannot open shared object file: No such file or directory"
    text = describe(error)
    assert "needs libxcb-cursor.so.0" in text and "sudo apt install libxcb-cursor0" in text
    assert "mtp-studio serve" in text  # what still works without a window
    other = describe("libfoo.so.3: cannot open shared object file: No such file or directory")
    assert "needs libfoo.so.3" in other and "install the package that provides it" in other


def test_the_loader_really_says_it_that_way(tmp_path):
    """Check the pattern against the loader itself: a library that needs one that is not there."""
    import ctypes

    try:
        ctypes.CDLL(str(tmp_path / "libmissing-for-test.so.1"))
    except OSError as e:
        message = str(e)
    assert "cannot open shared object file" in message
    out = subprocess.run(
        [sys.executable, "-c", f"from app.displaycheck import describe; import sys; print(describe({message!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "needs libmissing-for-test.so.1" in out.stdout, out.stderr
