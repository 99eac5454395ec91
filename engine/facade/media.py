"""Pictures in a chat turn, as the chat page attaches, keeps and sends them: the checked
:class:`Media`, the content part that carries one in a conversation (:func:`media_part`),
the checks that turn a file's or the clipboard's bytes into one (:func:`from_bytes`, and
:func:`from_base64` for the pictures a saved chat keeps), and the refusal they raise
(:class:`InvalidRequestError`, whose words say what is wrong and what to do)."""

from __future__ import annotations

from engine.errors import InvalidRequestError
from engine.runtime.media import MEDIA_PART, Media
from engine.runtime.media import part as media_part
from engine.runtime.media.intake import MAX_MEDIA_BYTES, from_base64, from_bytes

__all__ = ["MAX_MEDIA_BYTES", "MEDIA_PART", "InvalidRequestError", "Media", "from_base64", "from_bytes", "media_part"]
