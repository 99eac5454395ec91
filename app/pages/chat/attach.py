"""The chat input's pictures: the message box that takes pasted and dropped pictures
(:class:`ChatInput`) and the tray above it (:class:`AttachTray`) that shows the pictures
waiting to be sent as thumbnails with a remove ×, says in its own words why something
offered was not attached, and says when the loaded model cannot see pictures, with a way
to find its projector. GUI thread.
"""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QSize, Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.pages.chat.images import Picture, from_mime, offers_pictures, read_file, thumbnail, NotAttached

THUMB = 56  # a pending picture's thumbnail fits a square this wide


class ChatInput(QPlainTextEdit):
    """The message box. Text is typed and pasted as usual; a paste (Ctrl+V) or a drop
    that holds files or an image is offered as pictures instead of becoming text.

    Signals:
        picturesOffered(QMimeData)   a paste or a drop of files or an image (read it at once)
    """

    picturesOffered = Signal(object)

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - Qt's name
        return offers_pictures(source) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt's name
        if offers_pictures(source):
            self.picturesOffered.emit(source)
            return
        super().insertFromMimeData(source)


class _Thumb(QFrame):
    """One pending picture: its thumbnail and a remove ×."""

    def __init__(self, picture: Picture, on_remove, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Thumb")
        self.picture = picture
        self.setFixedSize(THUMB + 8, THUMB + 8)
        self.setToolTip(picture.label)
        grid = QGridLayout(self)
        grid.setContentsMargins(3, 3, 3, 3)
        self.image = QLabel()
        self.image.setAlignment(Qt.AlignmentFlag.AlignCenter)
        small = thumbnail(picture.media.data, THUMB)
        if small.isNull():  # the engine reads it, Qt does not: say what it is
            self.image.setText(picture.media.mime.removeprefix("image/").upper())
            self.image.setObjectName("Hint")
        else:
            self.image.setPixmap(QPixmap.fromImage(small))
        grid.addWidget(self.image, 0, 0)
        self.remove_btn = QToolButton()
        self.remove_btn.setObjectName("ThumbRemove")
        self.remove_btn.setText("×")
        self.remove_btn.setFixedSize(QSize(18, 18))
        self.remove_btn.setToolTip(f"Remove {picture.name}")
        self.remove_btn.clicked.connect(lambda: on_remove(self))
        grid.addWidget(self.remove_btn, 0, 0, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignRight)


class AttachTray(QWidget):
    """The pictures waiting to go with the next message, above the input; hidden while
    there is nothing to show.

    Signals:
        changed()         a picture was attached or removed
        findProjector()   the user asked for the loaded model's projector (Find its projector…)
    """

    changed = Signal()
    findProjector = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._thumbs: list[_Thumb] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(4)
        row = QHBoxLayout()
        row.setSpacing(6)
        self._row = QHBoxLayout()
        self._row.setSpacing(6)
        row.addLayout(self._row)
        self.sight_note = QLabel("")
        self.sight_note.setObjectName("SightNote")
        self.sight_note.setWordWrap(True)
        row.addWidget(self.sight_note, 1)
        self.find_btn = QPushButton("Find its projector…")
        self.find_btn.setToolTip("Open the Models page to download this model's projector (mmproj) and load it with it")
        self.find_btn.clicked.connect(self.findProjector)
        row.addWidget(self.find_btn, 0, Qt.AlignmentFlag.AlignVCenter)
        row.addStretch(0)  # the thumbnails stay on the left when there is no note
        lay.addLayout(row)
        self.error = QLabel("")
        self.error.setObjectName("AttachError")
        self.error.setWordWrap(True)
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.error)
        self.show_blind(None)
        self._refresh()

    # ------------------------------------------------------------------ attach
    @property
    def pictures(self) -> list[Picture]:
        return [t.picture for t in self._thumbs]

    def offer(self, mime: QMimeData) -> None:
        """A paste or a drop: attach its pictures, say why any was not."""
        self.add(*from_mime(mime))

    def attach_files(self, paths: list[str]) -> None:
        """Files the user chose: attach those that are pictures, say why the others are not."""
        pictures, errors = [], []
        for p in paths:
            try:
                pictures.append(read_file(p))
            except NotAttached as e:
                errors.append(str(e))
        self.add(pictures, errors)

    def add(self, pictures: list[Picture], errors: list[str] = ()) -> None:  # type: ignore[assignment]
        """Attach ``pictures`` (checked) and show ``errors`` (or clear the last ones)."""
        for p in pictures:
            thumb = _Thumb(p, self._remove)
            self._thumbs.append(thumb)
            self._row.addWidget(thumb)
        self.error.setText("\n".join(errors))
        self._refresh()
        if pictures:
            self.changed.emit()

    def take(self) -> list[Picture]:
        """The pending pictures, now sent: the tray is emptied."""
        out = self.pictures
        self.clear()
        return out

    def clear(self) -> None:
        had = bool(self._thumbs)
        for t in self._thumbs:
            t.deleteLater()
        self._thumbs.clear()
        self.error.setText("")
        self._refresh()
        if had:
            self.changed.emit()

    def _remove(self, thumb: _Thumb) -> None:
        if thumb in self._thumbs:
            self._thumbs.remove(thumb)
            thumb.deleteLater()
            self.error.setText("")
            self._refresh()
            self.changed.emit()

    # ------------------------------------------------------------------- sight
    def show_blind(self, note: str | None) -> None:
        """Say ``note`` (the loaded model cannot see pictures) with Find its projector…;
        None: nothing to say."""
        self.sight_note.setText(note or "")
        self.sight_note.setVisible(bool(note))
        self.find_btn.setVisible(bool(note))
        self._refresh()

    @property
    def blind(self) -> bool:
        return not self.sight_note.isHidden()

    def _refresh(self) -> None:
        self.error.setVisible(bool(self.error.text()))
        self.setVisible(bool(self._thumbs) or bool(self.error.text()) or self.blind)
