"""Opening a GGUF with the app: from the command line, a file manager, or macOS Finder."""

from __future__ import annotations

from PySide6.QtGui import QFileOpenEvent
from PySide6.QtWidgets import QApplication

from app.main import install_file_open_handler, model_argument


def test_the_model_argument_is_found_however_it_is_passed():
    assert model_argument(["/m/Qwen.GGUF"]) == "/m/Qwen.GGUF"  # .desktop Exec=mtp-studio %f
    assert model_argument(["--model=/m/a.gguf"]) == "/m/a.gguf"
    assert model_argument(["--demo"]) is None and model_argument([]) is None


def test_startup_loads_the_model_it_was_given(qtbot, window, fixtures):
    model = fixtures["full"].path
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        window.models.load_startup(model)
    assert window.models.path == str(model)
    assert window.models.current.mtp != "off"


def test_a_finder_open_event_loads_the_model(qtbot, window, fixtures):
    app = QApplication.instance()
    handler = install_file_open_handler(app, window.models)
    try:
        model = fixtures["random"].path
        with qtbot.waitSignal(window.models.loaded, timeout=30000):
            QApplication.sendEvent(app, QFileOpenEvent(str(model)))
        assert window.models.path == str(model)
        # other files are not ours to take
        assert not handler.eventFilter(app, QFileOpenEvent("/tmp/notes.txt"))
    finally:
        app.removeEventFilter(handler)
