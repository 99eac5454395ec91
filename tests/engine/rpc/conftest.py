"""Two llama.cpp RPC servers on loopback (CPU), started the way `mtp-studio rpc serve` starts them."""

from __future__ import annotations

import pytest

from engine.rpc.server import RpcServer, ServerOptions, free_port

__all__ = ["free_port", "start_server"]


def start_server(**kw) -> RpcServer:
    return RpcServer(ServerOptions(port=0, threads=1, **kw)).start()


@pytest.fixture(scope="package")
def rpc_pair():
    servers = [start_server(), start_server()]
    yield servers
    for s in servers:
        s.stop()
