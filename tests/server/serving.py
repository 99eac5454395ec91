"""A real engine with models loaded and the real HTTP server on it, for the endpoint's tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings


@contextmanager
def serving(
    specs: list[LoadSpec], settings: ServerSettings | None = None, defaults: EngineConfig | None = None
) -> Iterator[tuple[ServerThread, Engine]]:
    """``specs`` loaded side by side on an engine started with ``defaults``, served with
    ``settings`` (port 0 unless said) once it answers; both stopped afterwards."""
    eng = Engine(defaults or EngineConfig()).start()
    srv = None
    try:
        for spec in specs:
            eng.submit(J.LoadModel(spec, replace=False)).result(60)
        srv = ServerThread(eng, settings or ServerSettings(port=0)).start()
        srv.wait_ready()
        yield srv, eng
    finally:
        if srv is not None:
            srv.stop()
        eng.stop()
