"""Chat history that survives a restart: one JSON file per conversation, written
atomically in the platformdirs data folder. Plain Python (no Qt)."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Conversation:
    id: str
    title: str = "New chat"
    system: str = ""
    messages: list[dict] = field(default_factory=list)  # {"role", "content", "stats"?}
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    model: str | None = None

    def chat_messages(self) -> list[dict]:
        """The messages to send to the model: system prompt first, no stats."""
        head = [{"role": "system", "content": self.system}] if self.system.strip() else []
        return head + [{"role": m["role"], "content": m["content"]} for m in self.messages]


class ChatStore:
    def __init__(self, folder: Path | None = None):
        if folder is None:
            from engine.paths import data_dir

            folder = data_dir() / "chats"
        self.folder = folder

    def new(self, system: str = "") -> Conversation:
        return Conversation(id=uuid.uuid4().hex[:12], system=system)

    def all(self) -> list[Conversation]:
        out = []
        if self.folder.is_dir():
            for p in self.folder.glob("*.json"):
                try:
                    out.append(Conversation(**json.loads(p.read_text(encoding="utf-8"))))
                except (OSError, ValueError, TypeError):
                    continue  # a damaged file is skipped, not fatal
        return sorted(out, key=lambda c: c.updated, reverse=True)

    def save(self, conv: Conversation) -> None:
        conv.updated = time.time()
        if conv.title == "New chat":
            first = next((m["content"] for m in conv.messages if m["role"] == "user"), "")
            if first.strip():
                conv.title = " ".join(first.split())[:60]
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{conv.id}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(conv), indent=1), encoding="utf-8")
        tmp.replace(path)

    def delete(self, conv_id: str) -> None:
        (self.folder / f"{conv_id}.json").unlink(missing_ok=True)
