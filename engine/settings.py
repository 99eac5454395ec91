"""User settings: one versioned schema, migrated forward, stored as JSON.

Plain dataclasses (no Qt): the GUI edits them, the engine is handed the values it
needs. The file lives in the platformdirs config folder, is written atomically with
owner-only permissions (it may hold a Hugging Face token), and a damaged file is kept
aside as ``settings.json.bad`` instead of being lost.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2


@dataclass
class MtpPrefs:
    source: str = "auto"  # off | integrated | external | auto
    depth: str = "auto"  # "1".."8" or "auto"


@dataclass
class ChatPrefs:
    system_prompt: str = ""
    max_tokens: int = 1024
    temperature: float = 0.0


@dataclass
class ServerPrefs:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str = ""
    cors_origins: list[str] = field(default_factory=list)
    autostart: bool = False


@dataclass
class WindowPrefs:
    geometry: str = ""  # base64 of QWidget.saveGeometry()
    page: str = "chat"
    performance_visible: bool = True


@dataclass
class Settings:
    schema_version: int = SCHEMA_VERSION
    last_model: str | None = None  # path of the model to load at start (None: the demo)
    last_head: str | None = None
    n_ctx: int = 4096
    max_draft_depth: int = 4
    mtp: MtpPrefs = field(default_factory=MtpPrefs)
    chat: ChatPrefs = field(default_factory=ChatPrefs)
    server: ServerPrefs = field(default_factory=ServerPrefs)
    window: WindowPrefs = field(default_factory=WindowPrefs)
    hub_token: str = ""
    library_limit_gb: float = 0.0  # 0: no limit

    def __repr__(self) -> str:  # never print the token or API key
        return f"Settings(version={self.schema_version}, last_model={self.last_model!r}, ...)"


# ------------------------------------------------------------------ migrations
def _v1_to_v2(d: dict) -> dict:
    """v1 kept the draft depth and MTP source at the top level, and the port there too."""
    d = dict(d)
    mtp = d.setdefault("mtp", {})
    if "draft_depth" in d:
        mtp["depth"] = str(d.pop("draft_depth"))
    if "mtp_source" in d:
        mtp["source"] = d.pop("mtp_source")
    if "server_port" in d:
        d.setdefault("server", {})["port"] = d.pop("server_port")
    return d


MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _v1_to_v2}


def migrate(d: dict) -> dict:
    version = int(d.get("schema_version", 1))
    if version > SCHEMA_VERSION:
        log.warning("settings are from a newer version (%s); unknown fields are ignored", version)
        return d
    while version < SCHEMA_VERSION:
        d = MIGRATIONS[version](d)
        version += 1
    d["schema_version"] = SCHEMA_VERSION
    return d


def _build(cls, data: Any):
    """A dataclass from a dict, ignoring unknown keys and wrong-typed values."""
    if not isinstance(data, dict):
        return cls()
    kwargs = {}
    defaults = cls()
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        current = getattr(defaults, f.name)
        if is_dataclass(current):
            kwargs[f.name] = _build(type(current), value)
        elif current is None or value is None or isinstance(value, type(current)) or (
            isinstance(current, float) and isinstance(value, int)
        ):
            kwargs[f.name] = value
        else:
            log.warning("settings: ignoring %s (expected %s)", f.name, type(current).__name__)
    return cls(**kwargs)


def settings_path() -> Path:
    from engine.paths import config_dir

    return config_dir() / "settings.json"


def load(path: Path | None = None) -> Settings:
    path = path or settings_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings()
    except (OSError, ValueError) as e:
        log.warning("settings file %s is damaged (%s); starting from defaults, keeping it as .bad", path, e)
        try:
            path.replace(path.with_suffix(".json.bad"))
        except OSError:
            pass
        return Settings()
    return _build(Settings, migrate(raw))


def save(settings: Settings, path: Path | None = None) -> None:
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(settings), f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
