"""Images and audio in a prompt.

A request's media travels as :class:`Media` (checked bytes: what they are, how large)
inside a conversation's content parts, as ``{"type": "media", "media": Media}``
(:data:`MEDIA_PART`), whichever API brought it (:mod:`engine.runtime.media.intake` turns
each API's image and audio blocks into it). Rendering puts a marker in the prompt text
where each one stands; :mod:`engine.runtime.media.projector` (libmtmd) turns the marked text
and the media into prompt chunks, and the decode puts each media chunk's embeddings at its
positions (:mod:`engine.runtime.decode.prefill`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

#: the content part that carries one :class:`Media` through a conversation
MEDIA_PART = "media"


@dataclass(frozen=True, eq=False)
class Media:
    """One image or audio clip a request sent, its bytes checked (type sniffed, size and
    dimensions within bounds) but not decoded."""

    kind: Literal["image", "audio"]
    data: bytes = field(repr=False)
    mime: str  # image/png, image/jpeg, image/gif, image/bmp, audio/wav, audio/mpeg, audio/flac
    width: int = 0  # images: pixels, read from the header
    height: int = 0

    @property
    def digest(self) -> str:
        """SHA-256 of the bytes: the media's identity in the prompt cache."""
        d = self.__dict__.get("_digest")
        if d is None:
            d = hashlib.sha256(self.data).hexdigest()
            object.__setattr__(self, "_digest", d)
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Media) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)


def part(media: Media) -> dict:
    """The content part carrying ``media`` in a conversation."""
    return {"type": MEDIA_PART, "media": media}
