"""A real engine with nothing loaded, a residency over a library, and a real server on them:
what the on-demand tests (test_ondemand*.py) serve their library with."""

from __future__ import annotations

import time
from dataclasses import replace

from engine.hub.library import Library
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.ondemand.catalog import Catalog
from engine.runtime.ondemand.residency import Residency
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

BASE = LoadSpec("", n_ctx=4096, parallel=2, probe=True)


def spec_for(s) -> LoadSpec:
    if s.kind != "chat":
        return replace(BASE, path=s.path, mtp=MtpSource.OFF, parallel=1, name=s.name)
    return replace(BASE, path=s.path, head=s.head, name=s.name)


class Served:
    """An engine with nothing loaded, a residency over the library, and a server."""

    def __init__(self, library: Library, **kw):
        self.engine = Engine(EngineConfig(request=Defaults(draft_depth=2))).start()
        self.catalog = Catalog(library)
        self.residency = Residency(self.engine, self.catalog, spec_for, **kw)
        self.server = ServerThread(
            self.engine, ServerSettings(port=0, max_pending=32), residency=self.residency
        ).start()
        self.server.wait_ready()
        self.url = self.server.url

    def loaded(self) -> list[str]:
        return sorted(self.engine.models())

    def close(self) -> None:
        self.server.stop()
        self.residency.close()
        self.engine.stop()


def ids(library: Library) -> dict[str, str]:
    return {e.name: e.id for e in library.entries()}


def wait(cond, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()
