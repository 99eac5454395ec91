"""Settings of the local OpenAI-compatible endpoint."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    #: required when binding anything but loopback; clients send ``Authorization: Bearer``
    api_key: str | None = None
    #: origins allowed by CORS; empty = CORS off (browsers cannot call the endpoint)
    cors_origins: tuple[str, ...] = field(default=())
    max_body_bytes: int = 8 << 20
    #: requests waiting or running at once; beyond this, 429 with Retry-After
    max_pending: int = 16
    retry_after_s: int = 2
    #: draft depth for greedy requests that do not ask for one (None: the engine's)
    draft_depth: int | str | None = None

    def check(self) -> None:
        """Raise ValueError when the settings would expose the endpoint unsafely."""
        if not is_loopback(self.host) and not self.api_key:
            raise ValueError(
                f"Binding to {self.host} makes the endpoint reachable from other machines; "
                "set an API key (--api-key) to do that."
            )
        if "*" in self.cors_origins:
            raise ValueError("CORS needs an explicit list of origins; '*' is not allowed.")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is out of range")


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
