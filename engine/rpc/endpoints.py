"""RPC endpoints: ``host:port`` lists, parsed once and checked before llama.cpp sees them.

llama.cpp aborts the process when it cannot connect to an endpoint (``ggml-rpc.cpp``:
"Failed to connect"), so every endpoint is parsed and connected to here first, where a
failure is a sentence, not a crash. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from engine.errors import InvalidSettingError, RpcUnreachableError

DEFAULT_PORT = 50052  # rpc-server's default
#: llama.cpp's client limit (GGML_RPC_MAX_SERVERS)
MAX_SERVERS = 16


@dataclass(frozen=True, order=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_endpoint(text: str) -> Endpoint:
    """``host:port`` (``[v6]:port`` for IPv6). The port is required: a list of helpers
    with guessed ports is a list of wrong helpers."""
    s = text.strip()
    if not s:
        raise InvalidSettingError("An RPC endpoint is empty; write it as host:port, e.g. 192.168.1.20:50052.")
    if s.startswith("["):
        host, sep, rest = s[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        ok = bool(sep and host and port_text)
    else:
        host, sep, port_text = s.rpartition(":")
        ok = bool(sep and host and ":" not in host)
    if not ok:
        raise InvalidSettingError(f"RPC endpoint {s!r} is not host:port (for example 192.168.1.20:{DEFAULT_PORT}).")
    if any(c.isspace() for c in host) or "/" in host:
        raise InvalidSettingError(f"RPC endpoint {s!r} has an invalid host name.")
    try:
        port = int(port_text)
    except ValueError:
        raise InvalidSettingError(f"RPC endpoint {s!r}: the port {port_text!r} is not a number.") from None
    if not 1 <= port <= 65535:
        raise InvalidSettingError(f"RPC endpoint {s!r}: the port must be between 1 and 65535.")
    return Endpoint(host, port)


def parse_endpoints(value: str | list[str] | tuple[str, ...] | None) -> tuple[Endpoint, ...]:
    """A comma-separated string or a list of ``host:port``; duplicates are an error (the
    same server twice would be counted as two devices)."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    items = [x for x in (i.strip() for i in items) if x]
    eps = tuple(parse_endpoint(x) for x in items)
    seen: set[Endpoint] = set()
    for ep in eps:
        if ep in seen:
            raise InvalidSettingError(f"RPC endpoint {ep} is listed twice.")
        seen.add(ep)
    if len(eps) > MAX_SERVERS:
        raise InvalidSettingError(f"At most {MAX_SERVERS} RPC endpoints can be used (llama.cpp's limit); {len(eps)} were given.")
    return eps


def format_endpoints(eps: tuple[Endpoint, ...] | list[Endpoint]) -> str:
    return ",".join(str(e) for e in eps)


def check_reachable(eps: tuple[Endpoint, ...] | list[Endpoint], timeout: float = 3.0) -> None:
    """Connect to each endpoint once. Raises :class:`RpcUnreachableError` naming every
    endpoint that did not answer and what to do."""
    bad = []
    for ep in eps:
        try:
            with socket.create_connection((ep.host, ep.port), timeout=timeout):
                pass
        except OSError as e:
            reason = e.strerror or type(e).__name__
            bad.append(f"{ep} ({reason})")
    if bad:
        raise RpcUnreachableError(
            "Cannot reach RPC server " + ", ".join(bad) + ". Start it on that machine with "
            "`mtp-studio rpc serve` (add --host with its address to accept other machines), "
            "check the address and port, or remove it from the RPC list."
        )


def parse_tensor_split(value: str | list | tuple | None) -> tuple[float, ...] | None:
    """``"3,1,1"``: one non-negative weight per device (remote ones first, in endpoint
    order, then this machine's); None or empty: by free memory."""
    if value is None or value == "" or value == ():
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        weights = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        raise InvalidSettingError(f"The tensor split {value!r} must be numbers separated by commas, e.g. 3,1,1.") from None
    if any(w < 0 or w != w for w in weights) or not any(w > 0 for w in weights):
        raise InvalidSettingError("Tensor split weights must be >= 0, with at least one above 0.")
    return weights
