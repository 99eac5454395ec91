"""Starting the desktop app: settings, the engine thread, the bridge, the window, and
the model to chat with (the bundled demo the first time)."""

from __future__ import annotations

import logging
import logging.handlers
import sys
import threading


def _setup_logging() -> None:
    from engine.facade import ensure, log_dir

    handler = logging.handlers.RotatingFileHandler(
        ensure(log_dir()) / "mtp-studio.log", maxBytes=2 << 20, backupCount=3
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("llama.cpp").setLevel(logging.WARNING)

    def thread_hook(args) -> None:
        logging.getLogger("mtp_studio").error(
            "uncaught exception in thread %s",
            args.thread.name if args.thread else "?",
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    threading.excepthook = thread_hook


def build_app(argv: list[str] | None = None, *, settings_path=None, engine=None):
    """Everything but the event loop: (QApplication, window, context). Tests use it."""
    from PySide6.QtWidgets import QApplication

    from app.bridge import EngineBridge
    from app.context import AppContext
    from app.endpoint import Endpoint
    from app.history import ChatStore
    from app.resources import app_icon, style_sheet
    from app.window import MainWindow
    from engine.facade import settings as settings_mod
    from engine.facade import Library
    from engine.facade import Engine, EngineConfig
    from engine.facade import INTERACTIVE

    app = QApplication.instance() or QApplication(argv or sys.argv[:1])
    app.setApplicationName("MTP Studio")
    app.setOrganizationName("MTP Studio")
    app.setWindowIcon(app_icon())
    app.setStyleSheet(style_sheet())
    settings, problems = settings_mod.load_checked(settings_path)
    if settings.exact:  # before llama.cpp is loaded: its kernels are chosen once per process
        from engine.facade import exact as exact_mod

        exact_mod.request()
    if engine is None:
        engine = Engine(EngineConfig(request=INTERACTIVE, prompt_cache_mb=settings.prompt_cache_mb)).start()
    else:
        engine.set_prompt_cache_mb(settings.prompt_cache_mb)
    limit = int(settings.library_limit_gb * 2**30) if settings.library_limit_gb > 0 else None
    ctx = AppContext(
        settings, EngineBridge(engine), Library(limit_bytes=limit), ChatStore(), settings_path=settings_path
    )
    window = MainWindow(ctx, Endpoint(ctx))
    if settings.server.autostart:  # "Start with MTP Studio"
        window.endpoint.try_start()
    if problems and ctx.messages is not None:
        ctx.messages.error("Some settings could not be used", "\n".join(f"• {p}" for p in problems))
    return app, window, ctx


def model_argument(argv: list[str]) -> str | None:
    """``mtp-studio MODEL.gguf`` or ``--model=MODEL.gguf`` (what a file manager passes)."""
    for arg in argv:
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
        if arg.lower().endswith(".gguf"):
            return arg
    return None


def install_file_open_handler(app, models) -> object:
    """macOS delivers "Open With MTP Studio" and drops on the Dock icon as QFileOpenEvent."""
    from PySide6.QtCore import QEvent, QObject

    class FileOpenFilter(QObject):
        def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.FileOpen and event.file().lower().endswith(".gguf"):
                models.load(event.file())
                return True
            return False

    handler = FileOpenFilter(app)
    app.installEventFilter(handler)
    return handler


def run_gui(argv: list[str]) -> int:
    import os

    from app.displaycheck import xcb_problem

    _setup_logging()
    if (problem := xcb_problem()) is not None:  # before Qt aborts with no word of what is missing
        print(f"mtp-studio: {problem}", file=sys.stderr)
        return 1
    app, window, ctx = build_app(argv)
    install_file_open_handler(app, window.models)
    window.show()
    window.models.load_startup(model_argument(argv))
    if os.environ.get("MTP_STUDIO_QUIT_AFTER_PAINT"):  # diagnostics: time a cold start to the window
        from PySide6.QtCore import QTimer

        QTimer.singleShot(0, lambda: (print("mtp-studio: window painted", flush=True), app.quit()))
    code = app.exec()
    window.endpoint.stop()
    ctx.bridge.stop()
    return code
