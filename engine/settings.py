"""User settings: one versioned schema, migrated forward, stored as JSON.

Plain dataclasses (no Qt): the GUI edits them, the engine is handed the values it
needs. The file lives in the platformdirs config folder, is written atomically with
owner-only permissions (it may hold a Hugging Face token). A file that is not JSON, or
JSON of the wrong shape, is moved aside as ``settings.json.bad`` and the app starts from
defaults; values of the wrong type or out of range are reset one by one (the original
file is copied aside first). Either way :func:`load_checked` says what it did, so the
app can tell the user: a bad file never stops the app from starting.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from engine.errors import BadSettingsFile
from engine.fileio import write_atomic, write_json_atomic
from engine.paths import config_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
#: host memory for prompt-cache snapshots unless set (MB; engine.runtime.decode.cache.snapshotcache)
DEFAULT_PROMPT_CACHE_MB = 4096
#: requests one loaded model decodes together in the app and ``serve`` (llama-server's
#: and LM Studio's default): engine.runtime.slots
DEFAULT_PARALLEL = 4
#: the context a load asks for unless told (lowered to what fits memory)
DEFAULT_CTX = 4096


@dataclass
class MtpPrefs:
    source: str = "auto"  # off | integrated | external | auto
    depth: str = "auto"  # "1".."8" or "auto"


@dataclass
class ChatPrefs:
    """The chat page's preferences. The page sends them with each reply as the reply's
    layer of defaults (``Generate.defaults``), never as its own values: a preference left
    unset (None, or 0 where it says so) lets the engine's value through (its request
    defaults, then the built-in ones: engine.runtime.decider), and each is checked where
    every request's values are. The controls show the engine's value for one left unset,
    and keep a value only where the user set it apart from the engine's: no default is
    written twice."""

    system_prompt: str = ""
    #: most tokens a reply may have (0: unset, the engine's)
    max_tokens: int = 0
    #: sampling (None: the engine's; greedy unless it says otherwise)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    #: while sampling, sample the drafts too (rejection sampling); None: the engine's
    sampled_draft: bool | None = None
    #: draft from the conversation itself too (docs/agent-speed.md); None: the engine's
    suffix_drafts: bool | None = None
    #: thinking models: most tokens a reply may think (0: unset, the engine's: unlimited
    #: unless it sets one)
    thinking_budget: int = 0


@dataclass
class ServerPrefs:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str = ""
    cors_origins: list[str] = field(default_factory=list)
    autostart: bool = False
    #: thinking models: the endpoint's default thinking budget (0: unlimited)
    thinking_budget: int = 0
    #: serve every library model by name, loaded on demand (engine.runtime.ondemand)
    serve_library: bool = True
    #: minutes a model loaded on demand stays loaded without requests (0: never unloaded)
    idle_ttl_min: int = 60
    #: models loaded at once; the least recently used idle one makes room
    max_models: int = 3
    #: fetch http(s) image URLs in requests (off: the endpoint reaches no address a
    #: client names; clients send the bytes instead)
    media_urls: bool = False
    #: a folder requests may read file:// media from (None: no files are read)
    media_folder: str | None = None


@dataclass
class RpcPrefs:
    """Other machines: the RPC servers a model's layers are spread over, and this
    machine's own server (engine.rpc)."""

    #: ``host:port`` of each helper's `rpc serve`; empty: this machine alone
    endpoints: list[str] = field(default_factory=list)
    #: one weight per device, remote ones first ("3,1,1"); empty: by free memory
    tensor_split: str = ""
    serve_port: int = 50052
    #: accept other machines (binds every address; the protocol has no authentication)
    serve_network: bool = False
    serve_cache: bool = False


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
    last_mmproj: str | None = None  # the projector it was loaded with (it sees images)
    n_ctx: int = DEFAULT_CTX
    max_draft_depth: int = 4
    mtp: MtpPrefs = field(default_factory=MtpPrefs)
    chat: ChatPrefs = field(default_factory=ChatPrefs)
    server: ServerPrefs = field(default_factory=ServerPrefs)
    rpc: RpcPrefs = field(default_factory=RpcPrefs)
    window: WindowPrefs = field(default_factory=WindowPrefs)
    hub_token: str = ""
    library_limit_gb: float = 0.0  # 0: no limit
    #: exact mode (engine.runtime.llama.exact): chosen before llama.cpp starts
    exact: bool = False
    #: host memory for prompt-cache snapshots, shared by the chats and the endpoint (0: off)
    prompt_cache_mb: int = DEFAULT_PROMPT_CACHE_MB
    #: requests decoded together (the window's chat and the endpoint's clients): the next
    #: load's slots (engine.runtime.slots)
    parallel: int = DEFAULT_PARALLEL

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
    if not isinstance(d, dict):
        raise BadSettingsFile(f"expected a JSON object, found {type(d).__name__}")
    version = d.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BadSettingsFile(f"schema_version must be a positive whole number, found {version!r}")
    if version > SCHEMA_VERSION:
        log.warning("settings are from a newer version (%s); unknown fields are ignored", version)
        return d
    while version < SCHEMA_VERSION:
        try:
            d = MIGRATIONS[version](d)
        except (AttributeError, TypeError, ValueError) as e:
            raise BadSettingsFile(f"cannot migrate version {version} settings: {e}") from None
        version += 1
    d["schema_version"] = SCHEMA_VERSION
    return d


#: allowed values of the string settings that name a choice
CHOICES: dict[str, tuple[str, ...]] = {
    "mtp.source": ("off", "integrated", "external", "auto"),
    "mtp.depth": ("auto", *(str(k) for k in range(1, 17))),
}
#: (low, high) of the numeric settings (None: unbounded)
RANGES: dict[str, tuple[float, float | None]] = {
    "n_ctx": (64, 1 << 22),
    "max_draft_depth": (0, 16),
    "chat.max_tokens": (0, 1 << 20),
    "chat.thinking_budget": (0, 1 << 20),
    "server.thinking_budget": (0, 1 << 20),
    "chat.temperature": (0.0, 2.0),
    "chat.top_p": (0.01, 1.0),
    "chat.top_k": (0, 100_000),
    "server.port": (0, 65535),
    "rpc.serve_port": (1, 65535),
    "library_limit_gb": (0.0, None),
    "prompt_cache_mb": (0, 1 << 20),
    "parallel": (1, 16),
}
#: settings that may be None besides their default's type
#: settings that may be unset (None), with the type of a set value
OPTIONAL: dict[str, type] = {
    "last_model": str,
    "last_head": str,
    "last_mmproj": str,
    "chat.temperature": float,
    "chat.top_p": float,
    "chat.top_k": int,
    "chat.sampled_draft": bool,
    "chat.suffix_drafts": bool,
    "server.media_folder": str,
}


def _type_ok(current: Any, value: Any, key: str) -> bool:
    if key in OPTIONAL:
        want = OPTIONAL[key]
        if value is None:
            return True
        if want is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if want is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, want)
    if current is None:
        return value is None or isinstance(value, str)
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(current, bool) and isinstance(value, bool)
    if isinstance(current, float):
        return isinstance(value, (int, float)) and math.isfinite(value)
    if isinstance(current, list):
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    return isinstance(value, type(current))


def _build(cls, data: Any, problems: list[str], prefix: str = ""):
    """A dataclass from a dict: unknown keys ignored, values of the wrong type or out
    of range replaced by the default (each noted in ``problems``)."""
    defaults = cls()
    if not isinstance(data, dict):
        if prefix:
            problems.append(f"{prefix.rstrip('.')} was not a section; using the defaults")
        return defaults
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        key = prefix + f.name
        value = data[f.name]
        current = getattr(defaults, f.name)
        if is_dataclass(current):
            kwargs[f.name] = _build(type(current), value, problems, key + ".")
            continue
        if key == "schema_version":
            continue
        if not _type_ok(current, value, key):
            kind = OPTIONAL[key].__name__ if key in OPTIONAL else type(current).__name__
            problems.append(f"{key} = {value!r} is not a {kind}; using {current!r}")
            continue
        if (isinstance(current, float) or OPTIONAL.get(key) is float) and isinstance(value, int):
            value = float(value)
        if key in CHOICES and value not in CHOICES[key]:
            problems.append(f"{key} = {value!r} is not one of {', '.join(CHOICES[key])}; using {current!r}")
            continue
        if key in RANGES and value is not None:
            low, high = RANGES[key]
            if value < low or (high is not None and value > high):
                problems.append(f"{key} = {value!r} is out of range; using {current!r}")
                continue
        kwargs[f.name] = value
    return cls(**kwargs)


def settings_path() -> Path:
    return config_dir() / "settings.json"


def load(path: Path | None = None) -> Settings:
    return load_checked(path)[0]


def load_checked(path: Path | None = None) -> tuple[Settings, list[str]]:
    """The settings, and what was wrong with the file (empty when nothing was)."""
    path = path or settings_path()
    bad = path.with_name(path.name + ".bad")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Settings(), []
    except OSError as e:
        return Settings(), [f"{path} cannot be read ({e.strerror}); using the default settings"]
    try:
        problems: list[str] = []
        settings = _build(Settings, migrate(json.loads(text)), problems)
    except (ValueError, RecursionError) as e:  # not JSON, or JSON of the wrong shape
        log.warning("settings file %s is unusable (%s); starting from defaults, keeping it as %s", path, e, bad.name)
        try:
            path.replace(bad)
        except OSError:
            pass
        return Settings(), [
            f"{path.name} could not be used ({e}); it was kept as {bad.name} and the defaults are in use"
        ]
    if problems:
        log.warning("settings file %s: %s", path, "; ".join(problems))
        try:
            _copy_aside(path, bad)
            problems.append(f"the original file was kept as {bad.name}")
        except OSError:
            pass
    return settings, problems


def _copy_aside(path: Path, bad: Path) -> None:
    write_atomic(bad, path.read_bytes(), mode=0o600)


def save(settings: Settings, path: Path | None = None) -> None:
    write_json_atomic(path or settings_path(), asdict(settings), indent=2, mode=0o600)
