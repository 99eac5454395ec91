"""Two llama.cpp RPC servers on loopback (CPU), started the way `mtp-studio rpc serve` starts them."""

from __future__ import annotations

import socket

import pytest

from engine.rpc.server import RpcServer, ServerOptions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(**kw) -> RpcServer:
    return RpcServer(ServerOptions(port=free_port(), threads=1, **kw)).start()


@pytest.fixture(scope="package")
def rpc_pair():
    servers = [start_server(), start_server()]
    yield servers
    for s in servers:
        s.stop()
