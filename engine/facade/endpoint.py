"""The local HTTP server (engine.server), as the app's endpoint service (app.endpoint) runs
it. Imported when the endpoint first starts: the HTTP stack stays out of the window's
start-up. (On-demand loading, which needs no HTTP, is in :mod:`engine.facade`.)"""

from __future__ import annotations

from engine.server.app import RequestEntry
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings

__all__ = ["RequestEntry", "ServerSettings", "ServerThread"]
