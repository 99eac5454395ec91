"""Serving the endpoint in this process: uvicorn on its own thread and event loop.

The socket is bound here first, so a busy port is a clear error at once and port 0
(tests) yields the real port before serving starts.
"""

from __future__ import annotations

import logging
import socket
import threading

from engine.runtime.engine import Engine
from engine.server.app import RequestLogFn, create_app
from engine.server.protocol import protocol_with_head_deadline
from engine.server.settings import ServerSettings

log = logging.getLogger("mtp_studio.server")


class ServerThread:
    def __init__(
        self, engine: Engine, settings: ServerSettings, *, on_request: RequestLogFn | None = None, residency=None
    ):
        self.engine = engine
        self.settings = settings
        self.on_request = on_request
        #: loads the models requests name (engine.runtime.ondemand); None: only what is loaded
        self.residency = residency
        self._server = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        #: the second port every route is also served on (ServerSettings.ollama_port)
        self.ollama_port: int | None = None
        self.socket: socket.socket | None = None

    @property
    def url(self) -> str:
        host = self.settings.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> ServerThread:
        import uvicorn

        app = create_app(self.engine, self.settings, on_request=self.on_request, residency=self.residency)
        sock = self._listen(self.settings.port)
        self.port = sock.getsockname()[1]
        self.socket = sock
        sockets = [sock]
        if self.settings.ollama_port is not None:  # where Ollama clients look (11434)
            try:
                extra = self._listen(self.settings.ollama_port)
            except OSError:
                sock.close()
                raise
            self.ollama_port = extra.getsockname()[1]
            sockets.append(extra)

        config = uvicorn.Config(
            app,
            http=protocol_with_head_deadline(self.settings.header_timeout_s),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=3,
            timeout_keep_alive=5,
            limit_concurrency=self.settings.max_connections,
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        started = threading.Event()
        server = self._server

        def serve() -> None:
            started.set()
            server.run(sockets=sockets)

        self._thread = threading.Thread(target=serve, name="mtp-server", daemon=True)
        self._thread.start()
        started.wait(5)
        log.info("serving on %s (API key %s)", self.url, "set" if self.settings.api_key else "not set")
        return self

    def _listen(self, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        # proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections
        # accepted from such a socket, and without it every response after the first on a
        # kept-alive connection waits ~40 ms (Nagle + the client's delayed ACK).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.settings.host, port))
        except OSError as e:
            sock.close()
            raise OSError(f"cannot listen on {self.settings.host}:{port}: {e.strerror}") from None
        sock.listen(128)
        return sock

    def wait_ready(self, timeout: float = 10.0) -> None:
        import time

        deadline = time.monotonic() + timeout
        while self._server is not None and not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start in time")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None
        self._server = None
