"""RPC endpoints: ``host:port`` lists, parsed once and checked before llama.cpp sees them.

llama.cpp aborts the process when it cannot connect to an endpoint (``ggml-rpc.cpp``:
"Failed to connect"), so every endpoint is parsed and connected to here first, where a
failure is a sentence, not a crash. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

from engine.errors import InvalidSettingError, RpcBusyError, RpcUnreachableError, RpcVersionError

DEFAULT_PORT = 50052  # rpc-server's default
#: llama.cpp's client limit (GGML_RPC_MAX_SERVERS)
MAX_SERVERS = 16


@dataclass(frozen=True, order=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (``127.x``, ``::1``); not other names."""
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
        raise InvalidSettingError(
            f"At most {MAX_SERVERS} RPC endpoints can be used (llama.cpp's limit); {len(eps)} were given."
        )
    return eps


def format_endpoints(eps: tuple[Endpoint, ...] | list[Endpoint]) -> str:
    return ",".join(str(e) for e in eps)


#: the protocol of the vendored llama.cpp (ggml-rpc.h): a server must have the same major
#: version and a minor version no newer than this client's
PROTO_MAJOR, PROTO_MINOR = 7, 0
_HELLO = 14  # RPC_CMD_HELLO, fixed forever by upstream
_CAPS = 24  # RPC_CONN_CAPS_SIZE


def hello(ep: Endpoint, timeout: float = 3.0) -> tuple[int, int, int]:
    """llama.cpp's HELLO handshake, done here where failure is an exception: the server's
    protocol version. Distinguishes a server that is down, one busy with another client
    (llama.cpp's server serves one client at a time; a second one would wait forever),
    and one speaking another protocol version (llama.cpp would abort)."""
    try:
        sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
    except OSError as e:
        raise RpcUnreachableError(
            f"Cannot reach RPC server {ep} ({e.strerror or type(e).__name__}). Start it on that machine with "
            "`mtp-studio rpc serve` (with --host and --allow-network to accept other machines), check the address "
            "and port, or remove it from the RPC list."
        ) from None
    with sock:
        try:
            sock.sendall(bytes([_HELLO]) + struct.pack("<Q", _CAPS) + bytes(_CAPS))
            reply = b""
            while len(reply) < 8 + 4 + _CAPS:
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
        except socket.timeout:
            raise RpcBusyError(
                f"RPC server {ep} accepted the connection but did not answer within {timeout:g} s. llama.cpp's RPC "
                "server serves one client at a time: another app or model is probably using it. Unload the model "
                "there, or start a second server on another port."
            ) from None
        except OSError as e:
            raise RpcUnreachableError(f"RPC server {ep} closed the connection during the handshake ({e}).") from None
    if len(reply) < 12 or struct.unpack("<Q", reply[:8])[0] != 4 + _CAPS:
        raise RpcVersionError(
            f"{ep} did not answer like a llama.cpp RPC server of protocol {PROTO_MAJOR}.x. Is something else listening "
            "on that port, or does it run a much older llama.cpp? Run `mtp-studio rpc serve` there."
        )
    major, minor, patch = reply[8], reply[9], reply[10]
    if major != PROTO_MAJOR or minor > PROTO_MINOR:
        raise RpcVersionError(
            f"RPC server {ep} speaks protocol {major}.{minor}.{patch}; this app speaks {PROTO_MAJOR}.{PROTO_MINOR}. "
            "Run the same MTP Studio version (or a llama.cpp with the same RPC protocol) on every machine."
        )
    return major, minor, patch


def check_reachable(eps: tuple[Endpoint, ...] | list[Endpoint], timeout: float = 3.0) -> None:
    """Handshake with each endpoint (:func:`hello`); the first failure is raised, naming the
    endpoint and what to do."""
    for ep in eps:
        hello(ep, timeout)


def parse_tensor_split(value: str | list | tuple | None) -> tuple[float, ...] | None:
    """``"3,1,1"``: one non-negative weight per device (remote ones first, in endpoint
    order, then this machine's); None or empty: by free memory."""
    if value is None or value == "" or value == ():
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        weights = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        raise InvalidSettingError(
            f"The tensor split {value!r} must be numbers separated by commas, e.g. 3,1,1."
        ) from None
    if any(w < 0 or w != w for w in weights) or not any(w > 0 for w in weights):
        raise InvalidSettingError("Tensor split weights must be >= 0, with at least one above 0.")
    return weights
