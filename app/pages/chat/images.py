"""Pictures in the chat: what a file, the clipboard or a drop offers, checked into a
:class:`Picture` (the engine's own checks, :func:`engine.facade.media.from_bytes`, so a
picture the engine would refuse is refused here, with its words, before it is sent), how
a conversation keeps one (base64 with its MIME type, :func:`saved`), and thumbnails.

Functions, no widgets; called on the GUI thread (QImage decodes the thumbnails).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice, QMimeData, Qt
from PySide6.QtGui import QImage

from engine.facade import human_size
from engine.facade.media import MAX_MEDIA_BYTES, InvalidRequestError, Media, from_bytes

#: the file dialog's filter: the types the engine's image decoder reads
FILE_FILTER = "Images (*.png *.jpg *.jpeg *.gif *.bmp);;All files (*)"
PASTED = "The pasted image"
_KINDS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/bmp": "BMP"}


class NotAttached(ValueError):
    """What was offered is not a picture the model can be sent; the words say why and
    what to do."""


@dataclass(frozen=True)
class Picture:
    """One checked picture: what the user knows it by (its file name, or "The pasted
    image") and its bytes as the engine takes them."""

    name: str
    media: Media

    @property
    def label(self) -> str:
        """ "photo.png · PNG 640×480 · 212 KB" (a thumbnail's tooltip)."""
        return f"{self.name} · {describe(self.media.mime, self.media.width, self.media.height, len(self.media.data))}"


def describe(mime: str, width: int, height: int, size: int) -> str:
    return f"{_KINDS.get(mime, mime)} {width}×{height} · {human_size(size)}"


# ---------------------------------------------------------------- checking
def check(data: bytes, name: str) -> Picture:
    """``data`` as a picture, or :class:`NotAttached` with the engine's words."""
    try:
        return Picture(name, from_bytes(data, name, kind="image"))
    except InvalidRequestError as e:
        raise NotAttached(str(e)) from None


def read_file(path: str | Path) -> Picture:
    """The picture in the file ``path`` (its size is looked at before it is read)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if not p.is_file():
            raise NotAttached(f"{p.name} is not a file: drop or choose picture files")
        if size > MAX_MEDIA_BYTES:
            raise NotAttached(
                f"{p.name} is {human_size(size)}, more than the {human_size(MAX_MEDIA_BYTES)} a picture may be: "
                "make it smaller"
            )
        data = p.read_bytes()
    except OSError as e:
        raise NotAttached(f"{p.name} could not be read ({e.strerror or e})") from None
    return check(data, p.name)


def png_of(image: QImage) -> bytes:
    """``image`` (a pasted one) as PNG bytes."""
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(buf.data().data())


def _local_files(mime: QMimeData) -> list[str]:
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile()] if mime.hasUrls() else []


def _image_only(mime: QMimeData) -> bool:
    """An image without text: a screenshot, a browser's Copy Image. (An office program
    copying text adds a picture of it too: that pastes as the text.)"""
    return mime.hasImage() and not mime.text().strip()


def offers_pictures(mime: QMimeData | None) -> bool:
    """Whether ``mime`` (a paste or a drop) holds files or an image without text: those
    become pictures (or say why not), never text in the message."""
    return mime is not None and (bool(_local_files(mime)) or _image_only(mime))


def from_mime(mime: QMimeData) -> tuple[list[Picture], list[str]]:
    """The pictures a paste or a drop offers, and the words for each one refused. Files
    first (their own bytes: a JPEG stays a JPEG); else the image itself, as PNG."""
    pictures: list[Picture] = []
    errors: list[str] = []
    files = _local_files(mime)
    for f in files:
        try:
            pictures.append(read_file(f))
        except NotAttached as e:
            errors.append(str(e))
    if not files and _image_only(mime):
        image = mime.imageData()
        if isinstance(image, QImage) and not image.isNull():
            try:
                pictures.append(check(png_of(image), PASTED))
            except NotAttached as e:
                errors.append(str(e))
        else:
            errors.append(f"{PASTED} could not be read: copy it again, or save it and attach the file")
    return pictures, errors


# -------------------------------------------------------------- keeping
def saved(p: Picture) -> dict:
    """A picture as a conversation keeps it (JSON): its bytes base64 with its MIME type."""
    m = p.media
    data = base64.b64encode(m.data).decode("ascii")
    return {"name": p.name, "mime": m.mime, "data": data, "width": m.width, "height": m.height}


# ----------------------------------------------------------- thumbnails
def thumbnail(data: bytes, side: int) -> QImage:
    """``data`` decoded and scaled to fit a ``side`` square (smaller ones stay as they
    are); a null QImage when Qt cannot decode it."""
    image = QImage.fromData(data)
    if image.isNull() or (image.width() <= side and image.height() <= side):
        return image
    return image.scaled(side, side, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)


def decoded(item: dict) -> bytes:
    """A saved picture's bytes (b'' when its base64 is damaged: the send says so)."""
    try:
        return base64.b64decode(item.get("data", ""), validate=True)
    except ValueError:
        return b""
