"""The chat transcript: a conversation's saved messages and, after them, the reply being
generated (an :class:`app.pages.chat.livereply.LiveReply`), redrawn in place as it streams.

Replies render as Markdown with code blocks that carry a Copy link, thinking in a block
above the answer (live while the model thinks, folded once done, opened and closed by
its header) and tool calls as cards; the HTML comes from :mod:`app.pages.chat.view`. The
links are handled here: ``copy:N`` puts code block N on the clipboard, ``think:KEY``
opens or closes a thinking block, web links open in the browser. A user message's
pictures show as thumbnails under its text (served to the document as ``pic:N``
resources), and a drop of picture files here offers them to the input. GUI thread.

Signals:
    codeCopied()                  a Copy link put a code block on the clipboard
    picturesOffered(QMimeData)    files or an image were dropped here (read it at once)
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QImage, QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QTextBrowser, QWidget

from app.pages.chat import view as chatview
from app.pages.chat.images import decoded, describe, offers_pictures, thumbnail
from app.pages.chat.livereply import LiveReply

LIVE_MS = 40  # the streaming reply is redrawn at most this often (and long ones less often)
PICTURE = 160  # a sent picture's thumbnail fits a square this wide


class Transcript(QTextBrowser):
    codeCopied = Signal()
    picturesOffered = Signal(object)

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
        self._error: str | None = None  # why the last turn got no reply
        self._pictures: list[QImage] = []  # the thumbnails the document shows, as pic:N
        self._thumbs: dict[str, QImage] = {}  # thumbnails by their picture's base64 (decoded once)
        self.setAcceptDrops(True)
        self.viewport().setAcceptDrops(True)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._render_live)
        self.anchorClicked.connect(self._on_anchor)

    # ------------------------------------------------------------------- show
    def show_messages(
        self,
        messages: list[dict],
        live: LiveReply | None = None,
        *,
        keep_scroll: bool = False,
        error: str | None = None,
    ) -> None:
        """The whole transcript: ``messages`` (kept, and read again on each redraw), then
        ``live`` (None: no reply is being generated), then ``error``: why the last turn
        got no reply (None: nothing to say)."""
        self._messages, self._live, self._error = messages, live, error
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
        self._pictures = []
        used: dict[str, QImage] = {}
        parts = [self._message_html(i, m, used) for i, m in enumerate(self._messages)]
        self._thumbs = used  # those of pictures no longer shown are let go
        if not self._messages:
            parts.append(
                '<p style="color:#6b7385">Start a conversation: type a message below '
                "(paste or drop pictures to send them with it).</p>"
            )
        if self._error:
            parts.append(chatview.error_html(self._error))
        self.setHtml("".join(parts))
        self._hist_codes = len(self._codes)
        self._live_start = None
        if self._live is not None:
            self._render_live()
        if keep_scroll:
            bar.setValue(was)
        else:
            self.moveCursor(QTextCursor.MoveOperation.End)

    def _message_html(self, i: int, m: dict, used: dict[str, QImage]) -> str:
        if m["role"] != "assistant":
            return chatview.plain_html(m["role"], m["content"], self._pictures_html(m.get("images") or [], used))
        return chatview.assistant_html(m, str(i), self._codes, expanded=str(i) in self._open)

    def _pictures_html(self, images: list[dict], used: dict[str, QImage]) -> str:
        sources = []
        for p in images:
            data = p.get("data", "")
            thumb = used.get(data) or self._thumbs.get(data)
            if thumb is None:
                thumb = thumbnail(decoded(p), PICTURE)
            used[data] = thumb
            self._pictures.append(thumb)
            size = len(data) * 3 // 4
            tip = f"{p.get('name') or 'picture'} · {describe(p['mime'], p.get('width', 0), p.get('height', 0), size)}"
            sources.append((f"pic:{len(self._pictures) - 1}", tip))
        return chatview.pictures_html(sources)

    def loadResource(self, kind: int, name: QUrl):  # noqa: N802 - Qt's name
        """The document asks for a picture's thumbnail (``pic:N``)."""
        if kind == QTextDocument.ResourceType.ImageResource.value and name.scheme() == "pic":
            n = name.path()
            if n.isdigit() and int(n) < len(self._pictures) and not self._pictures[int(n)].isNull():
                return self._pictures[int(n)]
            return QImage()
        return super().loadResource(kind, name)

    # ------------------------------------------------------------------ drops
    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if offers_pictures(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if offers_pictures(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if offers_pictures(event.mimeData()):
            event.acceptProposedAction()
            self.picturesOffered.emit(event.mimeData())
        else:
            super().dropEvent(event)

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
