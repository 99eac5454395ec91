"""The chat transcript: a conversation's saved messages and, after them, the reply being
generated (an :class:`app.pages.livereply.LiveReply`), redrawn in place as it streams.

Replies render as Markdown with code blocks that carry a Copy link, thinking in a block
above the answer (live while the model thinks, folded once done, opened and closed by
its header) and tool calls as cards; the HTML comes from :mod:`app.pages.chatview`. The
links are handled here: ``copy:N`` puts code block N on the clipboard, ``think:KEY``
opens or closes a thinking block, web links open in the browser. GUI thread.

Signals:
    codeCopied()   a Copy link put a code block on the clipboard
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QTextCursor
from PySide6.QtWidgets import QApplication, QTextBrowser, QWidget

from app.pages import chatview
from app.pages.livereply import LiveReply

LIVE_MS = 40  # the streaming reply is redrawn at most this often (and long ones less often)


class Transcript(QTextBrowser):
    codeCopied = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Transcript")
        self.setOpenLinks(False)  # copy:, think: and web links: _on_anchor
        self._messages: list[dict] = []  # the conversation's (the page's list, not a copy)
        self._live: LiveReply | None = None  # the reply being generated
        self._live_start: int | None = None  # where the streaming reply starts in the document
        self._live_ms = 0.0  # what the last redraw of it cost
        self._codes: list[str] = []  # the transcript's code blocks (Copy links copy:N)
        self._hist_codes = 0  # how many of them the saved messages hold
        self._open: set[str] = set()  # thinking blocks opened: message index, or "live"
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._render_live)
        self.anchorClicked.connect(self._on_anchor)

    # ------------------------------------------------------------------- show
    def show_messages(self, messages: list[dict], live: LiveReply | None = None, *, keep_scroll: bool = False) -> None:
        """The whole transcript: ``messages`` (kept, and read again on each redraw), then
        ``live`` (None: no reply is being generated)."""
        self._messages, self._live = messages, live
        self._redraw(keep_scroll)

    def close_blocks(self) -> None:
        """Fold every thinking block (another conversation is shown)."""
        self._open.clear()

    def new_live(self) -> None:
        """A new reply starts: its thinking block folded, its redraw cost not known yet."""
        self._open.discard("live")
        self._live_ms = 0.0

    def live_changed(self) -> None:
        """The live reply grew: redraw it soon (the GUI thread spends at most ~1/4 of its
        time redrawing)."""
        if not self._timer.isActive():
            self._timer.start(max(LIVE_MS, int(4 * self._live_ms)))

    def stop_live(self) -> None:
        self._timer.stop()

    # ----------------------------------------------------------------- render
    def _redraw(self, keep_scroll: bool = False) -> None:
        bar = self.verticalScrollBar()
        was = bar.value()
        self._codes = []
        parts = [self._message_html(i, m) for i, m in enumerate(self._messages)]
        if not self._messages:
            parts.append('<p style="color:#6b7385">Start a conversation: type a message below.</p>')
        self.setHtml("".join(parts))
        self._hist_codes = len(self._codes)
        self._live_start = None
        if self._live is not None:
            self._render_live()
        if keep_scroll:
            bar.setValue(was)
        else:
            self.moveCursor(QTextCursor.MoveOperation.End)

    def _message_html(self, i: int, m: dict) -> str:
        if m["role"] != "assistant":
            return chatview.plain_html(m["role"], m["content"])
        return chatview.assistant_html(m, str(i), self._codes, expanded=str(i) in self._open)

    def _render_live(self) -> None:
        """Redraw the streaming reply in place, after the saved messages."""
        if self._live is None:
            return
        bar = self.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        t0 = time.perf_counter()
        if self._live_start is None:
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertBlock()
            self._live_start = cursor.position()
        else:
            cursor.setPosition(self._live_start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
        del self._codes[self._hist_codes :]
        cursor.insertHtml(
            chatview.assistant_html(
                self._live.message(),
                "live",
                self._codes,
                expanded="live" in self._open,
                live_header=self._live.header(),
            )
        )
        if at_end:
            bar.setValue(bar.maximum())
        self._live_ms = (time.perf_counter() - t0) * 1000

    def _on_anchor(self, url: QUrl) -> None:
        scheme, what = url.scheme(), url.path()
        if scheme == "copy" and what.isdigit() and int(what) < len(self._codes):
            QApplication.clipboard().setText(self._codes[int(what)])
            self.codeCopied.emit()
        elif scheme == "think":
            self._open.symmetric_difference_update({what})
            self._redraw(keep_scroll=True)
        elif scheme in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)
