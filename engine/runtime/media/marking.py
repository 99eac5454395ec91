"""Where each picture stands in a rendered prompt.

Chat templates take text: before rendering, each media part of a conversation becomes a
text part holding a placeholder that names it (:func:`mark`); after rendering, the
placeholders are found in the text in the order the template wrote them — whatever it
reordered or dropped — and each becomes libmtmd's marker (:func:`unmark`), the media
listed in that order. A placeholder is random per process, so no user text can forge one.
"""

from __future__ import annotations

import re
import secrets

from engine.runtime.media import MEDIA_PART, Media
from engine.runtime.media.projector import MARKER

_NONCE = secrets.token_hex(6)
_PLACEHOLDER = re.compile(rf"<__mtp_media_{_NONCE}_(\d+)__>")


def _placeholder(k: int) -> str:
    return f"<__mtp_media_{_NONCE}_{k}__>"


def has_media(messages: list[dict] | None) -> bool:
    """Whether any message of a conversation holds a media part."""
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == MEDIA_PART for p in content):
            return True
    return False


def mark(messages: list[dict]) -> tuple[list[dict], list[Media]]:
    """The conversation with each media part replaced by a text placeholder, and the
    media in the order they were met."""
    media: list[Media] = []
    out = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == MEDIA_PART:
                parts.append({"type": "text", "text": _placeholder(len(media))})
                media.append(p["media"])
            else:
                parts.append(p)
        out.append({**m, "content": parts})
    return out, media


def unmark(text: str, media: list[Media]) -> tuple[str, list[Media]]:
    """The rendered ``text`` with libmtmd's marker where each placeholder was, and the
    media in the order the text holds them."""
    order: list[Media] = []

    def put(match: re.Match) -> str:
        order.append(media[int(match.group(1))])
        return MARKER

    return _PLACEHOLDER.sub(put, text), order
