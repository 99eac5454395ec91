"""The one place errors become words for people, and the one way to tell them things.

Everything the app reports goes through :class:`Messages`: short news in the status
bar, problems in a non-blocking dialog. Cancellation is news, never an error dialog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtWidgets import QMessageBox, QStatusBar, QWidget

from engine.facade import Cancelled, DiskSpaceError, MtpStudioError

log = logging.getLogger(__name__)


def user_text(error: BaseException) -> str:
    """What to tell a person about ``error`` (engine messages already say what to do)."""
    if isinstance(error, Cancelled):
        return "Cancelled."
    if isinstance(error, (MtpStudioError, DiskSpaceError)):
        return str(error)
    if isinstance(error, PermissionError):
        return f"Permission denied: {error.filename or error}. Choose a folder you can write to."
    if isinstance(error, FileNotFoundError):
        return f"File not found: {error.filename or error}."
    if isinstance(error, OSError):
        return f"{error.strerror or error} ({error.filename})" if error.filename else str(error)
    return f"Something went wrong: {type(error).__name__}: {error}. Details are in the log."


class Messages:
    def __init__(self, window: QWidget, status_bar: QStatusBar):
        self.window = window
        self.status_bar = status_bar
        self._dialogs: list[QMessageBox] = []

    def status(self, text: str, ms: int = 5000) -> None:
        self.status_bar.showMessage(text, ms)

    def error(
        self, title: str, error: BaseException | str, *, action: tuple[str, Callable[[], None]] | None = None
    ) -> QMessageBox | None:
        """A non-blocking warning dialog (and the status bar). ``action``: (button text,
        what it does) for a way out the user may choose, e.g. "Load anyway"."""
        if isinstance(error, Cancelled):
            self.status("Cancelled.")
            return None
        text = error if isinstance(error, str) else user_text(error)
        if not isinstance(error, str):
            log.info("%s: %s", title, text)
        self.status(f"{title}: {text}", 10000)
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.NoButton, self.window)
        if action is not None:
            label, do = action
            box.addButton(label, QMessageBox.ButtonRole.AcceptRole).clicked.connect(do)
            box.addButton(QMessageBox.StandardButton.Cancel)
        else:
            box.addButton(QMessageBox.StandardButton.Ok)
        box.setModal(False)
        box.finished.connect(lambda _=0, b=box: self._dialogs.remove(b) if b in self._dialogs else None)
        self._dialogs.append(box)
        box.open()
        return box

    @property
    def open_dialogs(self) -> list[QMessageBox]:
        return list(self._dialogs)
