"""A TCP relay in front of an RPC server that counts round trips and can add latency.

llama.cpp's RPC client talks request/response: every time the server answers after the
client spoke is one round trip, which a real network charges one latency for. The relay
counts those turns (``round_trips``) and bytes each way, and with ``delay`` holds each
answer back that long — a loopback stand-in for a LAN; ``rate`` limits the bytes per
second like a link's bandwidth. Used by the RPC benchmark and the
tests; never in the data path of a real deployment.
"""

from __future__ import annotations

import socket
import threading
import time

from engine.rpc.endpoints import Endpoint


class CountingProxy:
    def __init__(
        self, target: Endpoint, *, delay: float = 0.0, rate: float | None = None, host: str = "127.0.0.1", port: int = 0
    ):
        self.target = target
        self.delay = delay
        self.rate = rate  # bytes/s each way (a link's bandwidth), None: unlimited
        self._srv = socket.create_server((host, port))
        self.endpoint = Endpoint(host, self._srv.getsockname()[1])
        self._lock = threading.Lock()
        self.round_trips = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._last = "down"
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="rpc-proxy", daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.round_trips = self.bytes_up = self.bytes_down = 0

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._srv.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.target.host, self.target.port))
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, "down"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                with self._lock:
                    turn = direction == "down" and self._last == "up"
                    self._last = direction
                    if direction == "up":
                        self.bytes_up += len(data)
                    else:
                        self.bytes_down += len(data)
                        self.round_trips += turn
                if turn and self.delay:
                    time.sleep(self.delay)
                if self.rate:
                    time.sleep(len(data) / self.rate)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._srv.close()
        for s in self._conns:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> CountingProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
