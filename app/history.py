"""Chat history that survives a restart: one JSON file per conversation, written
atomically in the platformdirs data folder. Plain Python (no Qt).

A conversation's id names its file, so ids are generated here and checked on every read
and write, never trusted as paths. A file that does not hold a well-formed conversation
is renamed ``<name>.bad`` (kept, not deleted) and the others load as usual.

A user message may keep pictures: ``images``, a list of ``{"name", "mime", "data"
(base64), "width", "height"}`` (:func:`app.pages.chat.images.saved`). They go to the
model as the OpenAI shape has them: the text part first, then one media part each."""

from __future__ import annotations

import json
import logging
import math
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.facade import write_json_atomic

log = logging.getLogger(__name__)

_ID = re.compile(r"^[0-9a-f]{12}$")
ROLES = ("system", "user", "assistant", "tool")


class BadConversation(ValueError):
    pass


def check_id(conv_id: object) -> str:
    if not isinstance(conv_id, str) or not _ID.match(conv_id):
        raise BadConversation(f"{conv_id!r} is not a conversation id")
    return conv_id


def _from_json(data: object) -> Conversation:
    """A conversation from a file's JSON, or :class:`BadConversation` saying why not."""
    if not isinstance(data, dict):
        raise BadConversation("not a JSON object")
    known = {"id", "title", "system", "messages", "created", "updated", "model", "sampling"}
    kw = {k: v for k, v in data.items() if k in known}
    check_id(kw.get("id"))
    for key in ("title", "system"):
        if key in kw and not isinstance(kw[key], str):
            raise BadConversation(f"{key} is not text")
    for key in ("created", "updated"):
        v = kw.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise BadConversation(f"{key} is not a time")
    if kw.get("model") is not None and not isinstance(kw["model"], str):
        raise BadConversation("model is not text")
    if not isinstance(kw.get("sampling", {}), dict):
        raise BadConversation("sampling is not an object")
    messages = kw.get("messages", [])
    if not isinstance(messages, list):
        raise BadConversation("messages is not a list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BadConversation(f"message {i} is not a {{role, content}} object")
        if "stats" in m and not isinstance(m["stats"], dict):
            raise BadConversation(f"message {i} has stats that are not an object")
        if "images" in m and not (isinstance(m["images"], list) and all(_is_picture(p) for p in m["images"])):
            raise BadConversation(f"message {i} has images that are not [{{mime, data}}] objects")
    return Conversation(**kw)


def _is_picture(item: object) -> bool:
    """The shape a kept picture has (its bytes are checked when it is sent)."""
    return (
        isinstance(item, dict)
        and isinstance(item.get("mime"), str)
        and isinstance(item.get("data"), str)
        and isinstance(item.get("name", ""), str)
        and all(isinstance(item.get(k, 0), int) and not isinstance(item.get(k, 0), bool) for k in ("width", "height"))
    )


def _content(i: int, m: dict) -> str | list[dict]:
    """Message ``i``'s content for the model: its text, or with pictures the text part
    then a media part per picture; InvalidRequestError (saying which picture) when a kept
    picture's bytes are damaged."""
    images = m.get("images")
    if not images:
        return m["content"]
    from engine.facade.media import from_base64, media_part

    parts: list[dict] = [{"type": "text", "text": m["content"]}] if m["content"] else []
    for j, p in enumerate(images):
        where = f"{p.get('name') or 'The picture'} (picture {j + 1} of message {i + 1})"
        parts.append(media_part(from_base64(p["data"], where, mime=p["mime"], kind="image")))
    return parts


def has_pictures(messages: list[dict]) -> bool:
    return any(m.get("images") for m in messages)


@dataclass
class Conversation:
    id: str
    title: str = "New chat"
    system: str = ""
    messages: list[dict] = field(default_factory=list)  # {"role", "content", "stats"?, "images"?}
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    model: str | None = None
    #: the sampling settings last used in this chat (temperature, top_p, top_k, sampled_draft)
    sampling: dict = field(default_factory=dict)

    def chat_messages(self) -> list[dict]:
        """The messages to send to the model: system prompt first, no stats, a message's
        pictures as media parts after its text (InvalidRequestError: a kept picture is
        damaged)."""
        head = [{"role": "system", "content": self.system}] if self.system.strip() else []
        return head + [{"role": m["role"], "content": _content(i, m)} for i, m in enumerate(self.messages)]


class ChatStore:
    def __init__(self, folder: Path | None = None):
        if folder is None:
            from engine.facade import data_dir

            folder = data_dir() / "chats"
        self.folder = folder
        #: files set aside by the last :meth:`all`
        self.quarantined: list[str] = []

    def new(self, system: str = "") -> Conversation:
        return Conversation(id=uuid.uuid4().hex[:12], system=system)

    def all(self) -> list[Conversation]:
        """Every readable conversation, newest first; damaged files are set aside."""
        out = []
        self.quarantined: list[str] = []
        if self.folder.is_dir():
            for p in self.folder.glob("*.json"):
                if p.is_symlink() or not p.is_file():
                    continue
                try:
                    conv = _from_json(json.loads(p.read_text(encoding="utf-8")))
                    if conv.id != p.stem:
                        raise BadConversation(f"its id {conv.id!r} does not match its file name")
                except OSError:
                    continue
                except (ValueError, RecursionError) as e:  # BadConversation, bad JSON
                    self._quarantine(p, e)
                    continue
                out.append(conv)
        return sorted(out, key=lambda c: c.updated, reverse=True)

    def _quarantine(self, p: Path, why: Exception) -> None:
        bad = p.with_name(p.name + ".bad")
        log.warning("chat history %s is damaged (%s); kept as %s", p.name, why, bad.name)
        try:
            p.replace(bad)
            self.quarantined.append(p.name)
        except OSError:
            pass

    def _path(self, conv_id: str) -> Path:
        return self.folder / f"{check_id(conv_id)}.json"

    def save(self, conv: Conversation) -> None:
        conv.updated = time.time()
        if conv.title == "New chat":
            first = next((m for m in conv.messages if m["role"] == "user"), None)
            if first is not None and first["content"].strip():
                conv.title = " ".join(first["content"].split())[:60]
            elif first is not None and first.get("images"):
                n = len(first["images"])
                conv.title = f"{n} picture{'s' if n > 1 else ''}"
        write_json_atomic(self._path(conv.id), asdict(conv), indent=1)

    def delete(self, conv_id: str) -> None:
        self._path(conv_id).unlink(missing_ok=True)
