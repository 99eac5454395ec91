"""The app's local HTTP endpoint as a service: the OpenAI, Anthropic and Ollama APIs
(engine.server) over the window's engine, serving every library model by name on demand
when the user asks for it.

One :class:`Endpoint` is built with the app (:func:`app.main.build_app`) and lives as long
as it; it is started and stopped on the GUI thread only — by the Server page's button, by
"Start with MTP Studio" at launch, and by the window when it closes. The Server page only
shows it and asks. The HTTP server runs on its own thread (engine.server.runner); its
request log reaches the GUI thread through :attr:`Endpoint.request`, queued.

Signals (GUI thread):
    started(str)      the base URL, once it listens
    stopped()
    request(object)   one request-log entry (engine.server.app.RequestEntry: time, method,
                      path, status, ms, api; never headers, bodies or keys)
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.context import AppContext, load_depth
from engine.facade import CHAT, Catalog, J, LoadSpec, MtpSource, MtpStudioError, Residency, ResidentInfo

if TYPE_CHECKING:
    from engine.facade.endpoint import ServerThread


class Endpoint(QObject):
    started = Signal(str)
    stopped = Signal()
    request = Signal(object)

    def __init__(self, ctx: AppContext, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self._server: ServerThread | None = None

    # ------------------------------------------------------------------ state
    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str | None:
        return self._server.url if self._server is not None else None

    @property
    def residency(self) -> Residency | None:
        """The on-demand loader while the endpoint serves the library, else None."""
        return self._server.residency if self._server is not None else None

    def loaded(self) -> list[ResidentInfo]:
        """The loaded models as the Server page lists them: the residency's while the
        endpoint serves the library on demand, else what the engine has loaded."""
        if self.residency is not None:
            return self.residency.loaded()
        return [
            ResidentInfo(n, "loaded", i.memory_bytes, -1, 0, -1.0, None, True, False)
            for n, i in self.ctx.bridge.models().items()
        ]

    # -------------------------------------------------------------- commands
    def start(self) -> str:
        """Listen with the settings in ``ctx.settings.server``; the base URL. Raises
        ValueError (settings a safe endpoint refuses: beyond loopback without a key),
        OSError (the port is taken) or TimeoutError (it did not come up)."""
        if self._server is not None:
            return self._server.url
        from engine.facade import endpoint as E  # the HTTP stack: not before the first start

        s = self.ctx.settings.server
        settings = E.ServerSettings(
            host=s.host,
            port=s.port,
            api_key=s.api_key or None,
            cors_origins=tuple(s.cors_origins),
            thinking_budget=s.thinking_budget or None,
            media_urls=s.media_urls,
            media_folder=s.media_folder or None,
        )
        settings.check()
        residency = self._residency()
        server = E.ServerThread(self.ctx.bridge.engine, settings, on_request=self.request.emit, residency=residency)
        try:
            server.start()
            server.wait_ready()
        except BaseException:
            server.stop()
            if residency is not None:
                residency.close()
            raise
        self._server = server
        self.started.emit(server.url)
        return server.url

    def try_start(self) -> bool:
        """:meth:`start`, saying in a message why it could not (False)."""
        try:
            self.start()
        except (ValueError, OSError, TimeoutError) as e:
            if self.ctx.messages is not None:
                self.ctx.messages.error("Cannot start the server", e)
            return False
        return True

    def stop(self) -> None:
        """Stop listening (running requests are cancelled) and unload nothing the window
        loaded; the models the endpoint loaded on demand go with its residency."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stop()
        if server.residency is not None:
            server.residency.close()
        self.stopped.emit()

    def unload(self, name: str) -> None:
        """Unload ``name`` once its running requests end: through the residency while it
        serves on demand (on a thread of its own: it waits), else as an engine job."""
        residency = self.residency
        if residency is None:
            self.ctx.bridge.run(J.UnloadModel(name))
            return

        def unload() -> None:
            try:
                residency.unload(name)
            except MtpStudioError:
                pass  # gone already

        threading.Thread(target=unload, name="mtp-unload", daemon=True).start()

    # -------------------------------------------------------------- on demand
    def _residency(self) -> Residency | None:
        """Loads on demand for the endpoint, with this app's load settings; None unless the
        user asked for the library to be served."""
        st = self.ctx.settings
        s = st.server
        if not s.serve_library:
            return None

        def spec_for(m) -> LoadSpec:
            source = st.mtp.source if (m.head is not None or st.mtp.source != "external") else "auto"
            spec = LoadSpec(
                m.path,
                head=m.head,
                mtp=MtpSource(source),
                n_ctx=st.n_ctx,
                max_draft_depth=load_depth(st),
                fit="shrink",
                parallel=max(1, min(st.parallel, 16)),
                name=m.name,
            )
            return replace(spec, mtp=MtpSource.OFF, head=None, parallel=1) if m.kind != CHAT else spec

        return Residency(
            self.ctx.bridge.engine,
            Catalog(self.ctx.library),
            spec_for,
            max_loaded=s.max_models,
            idle_ttl=s.idle_ttl_min * 60 if s.idle_ttl_min else None,
        )


__all__ = ["Endpoint"]
