"""Settings of the local OpenAI-compatible endpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.rpc.endpoints import is_loopback
from engine.runtime.decode.depth import DraftDepth
from engine.runtime.jobs import Defaults
from engine.runtime.media.intake import MediaPolicy


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    #: required when binding anything but loopback; clients send ``Authorization: Bearer``
    api_key: str | None = None
    #: origins allowed by CORS; empty = CORS off (browsers cannot call the endpoint)
    cors_origins: tuple[str, ...] = field(default=())
    #: a request body's bytes: a 20 MiB picture (engine.runtime.media.intake) in base64 fits
    max_body_bytes: int = 32 << 20
    #: requests waiting or running at once; beyond this, 429 with Retry-After
    max_pending: int = 16
    retry_after_s: int = 2
    #: draft depth (an integer or "auto") for requests that do not ask for one, greedy or
    #: sampled alike (None: the engine's default)
    draft_depth: DraftDepth | int | str | None = None
    #: tokens generated for requests that give no max_tokens (None: the engine's)
    max_tokens: int | None = None
    #: most tokens a reply may think for requests that give no thinking_budget_tokens
    #: (None: unlimited)
    thinking_budget: int | None = None
    #: host names accepted in the ``Host`` header besides loopback names (DNS-rebinding
    #: guard); bound to a non-loopback address with this empty, any host is accepted
    allowed_hosts: tuple[str, ...] = field(default=())
    #: a client must send a complete request head within this, and each part of its body
    #: within ``body_timeout_s`` (slow clients cannot hold connections open)
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    #: open connections at once; beyond this, new requests get 503
    max_connections: int = 64
    #: also listen on this port (Ollama's 11434, where its clients look; None: not)
    ollama_port: int | None = None
    #: fetch the http(s) image URLs requests send (off: clients send the bytes)
    media_urls: bool = False
    #: the folder requests may read ``file://`` media from (None: no files are read)
    media_folder: str | Path | None = None

    @property
    def request_defaults(self) -> Defaults:
        """The endpoint's defaults for what a request leaves out (over the engine's)."""
        return Defaults(max_tokens=self.max_tokens, draft_depth=self.draft_depth, thinking_budget=self.thinking_budget)

    @property
    def media_policy(self) -> MediaPolicy:
        """Where requests' images and audio may come from besides their own bytes
        (engine.runtime.media.intake)."""
        folder = Path(self.media_folder).expanduser() if self.media_folder else None
        return MediaPolicy(allow_urls=bool(self.media_urls), media_folder=folder)

    def check(self) -> None:
        """Raise ValueError when the settings would expose the endpoint unsafely."""
        if not is_loopback(self.host) and not self.api_key:
            raise ValueError(
                f"Binding to {self.host} makes the endpoint reachable from other machines; "
                "set an API key (--api-key) to do that."
            )
        if "*" in self.cors_origins:
            raise ValueError("CORS needs an explicit list of origins; '*' is not allowed.")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port!r} is out of range (0-65535)")
        if "*" in self.allowed_hosts:
            raise ValueError("allowed hosts need explicit names; '*' is not allowed.")
        for name in ("header_timeout_s", "body_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if (
            isinstance(self.max_connections, bool)
            or not isinstance(self.max_connections, int)
            or self.max_connections < 1
        ):
            raise ValueError("max_connections must be at least 1")
        if self.media_folder and not Path(self.media_folder).expanduser().is_dir():
            raise ValueError(
                f"the media folder {str(self.media_folder)!r} is not a folder; choose an existing folder for "
                "requests' file:// images, or leave it unset"
            )

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request's ``Host`` may reach this endpoint. Bound to loopback, only
        loopback names (and ``allowed_hosts``): a web page whose name was rebound to
        127.0.0.1 sends its own name and is refused."""
        name = _host_name(host_header)
        if name is None:
            return False
        if name in LOOPBACK_NAMES or is_loopback(name) or name in self.allowed_hosts:
            return True
        if is_loopback(self.host):
            return False
        return not self.allowed_hosts or name == self.host


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _host_name(host_header: str) -> str | None:
    """The name part of a ``Host`` header (``[::1]:8080`` -> ``::1``), lower-cased."""
    h = host_header.strip().lower()
    if not h:
        return None
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end > 0 else None
    name, _, port = h.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None
