"""The OpenAI-compatible endpoint, built by :func:`create_app` over a running engine.

Stack: Starlette (the ASGI core FastAPI stands on) served by uvicorn; see the README
for why not FastAPI itself. Routes live one per module in ``routes/``; state lives on
``app.state``. Middleware, outermost first: request log (method, path, status, time —
never headers or bodies, so no key is ever logged), CORS (off unless an explicit
allowlist is set), body size limit, API key.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.errors import MtpStudioError
from engine.runtime.engine import Engine
from engine.server import errors as E
from engine.server.routes import chat, completions, health, metrics, models
from engine.server.settings import ServerSettings

log = logging.getLogger("mtp_studio.server")

ROUTE_MODULES = (models, chat, completions, health, metrics)
PUBLIC_PATHS = {"/health"}

RequestLogFn = Callable[[dict[str, Any]], None]


def _send_error(err: E.HTTPError):
    return E.response(err)


class RequestLog:
    """Counts requests by route and status, and reports each finished request."""

    def __init__(self, app, state, on_request: RequestLogFn | None):
        self.app = app
        self.state = state
        self.on_request = on_request

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            path = scope["path"]
            route = path if path in _KNOWN else "other"
            self.state.requests[(route, status["code"])] += 1
            entry = {
                "time": time.time(),
                "method": scope["method"],
                "path": path,
                "status": status["code"],
                "ms": (time.perf_counter() - t0) * 1000,
                "client": (scope.get("client") or ("?", 0))[0],
            }
            log.info("%s %s %s %.0f ms", entry["method"], path, entry["status"], entry["ms"])
            if self.on_request is not None:
                try:
                    self.on_request(entry)
                except Exception:
                    log.exception("request log callback failed")


class RefusePreflight:
    """With CORS off, a browser preflight gets a clear refusal (and no CORS headers)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = dict(scope["headers"])
            if b"access-control-request-method" in headers:
                resp = _send_error(E.HTTPError(403, "CORS is off for this endpoint; allow your origin in its settings.",
                                               code="cors_disabled"))  # fmt: skip
                return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = _send_error(
            E.HTTPError(413, f"The request body is larger than {self.limit} bytes.", code="request_too_large")
        )
        for k, v in scope["headers"]:
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await too_big(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await too_big(scope, receive, send)


class _TooLarge(Exception):
    pass


class ApiKey:
    def __init__(self, app, key: str | None):
        self.app = app
        self.key = key.encode() if key else None

    async def __call__(self, scope, receive, send):
        if self.key is None or scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["method"] == "OPTIONS":
            return await self.app(scope, receive, send)
        got = b""
        for k, v in scope["headers"]:
            if k == b"authorization":
                got = v
        scheme, _, token = got.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
            msg = "Missing API key: send 'Authorization: Bearer <key>'." if not got else "Incorrect API key."
            resp = _send_error(E.HTTPError(401, msg, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}))
            return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


_KNOWN = {r.path for m in ROUTE_MODULES for r in m.routes}


async def _handle_http_error(request: Request, exc: E.HTTPError) -> JSONResponse:
    return E.response(exc)


async def _handle_engine_error(request: Request, exc: MtpStudioError) -> JSONResponse:
    return E.response(E.from_exception(exc, request.app.state.settings.retry_after_s))


async def _handle_starlette(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    msg = {404: f"No route {request.url.path}.", 405: f"{request.method} is not allowed on {request.url.path}."}
    return E.response(E.HTTPError(exc.status_code, msg.get(exc.status_code, str(exc.detail)), code=f"http_{exc.status_code}"))


async def _handle_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s", request.url.path)
    return E.response(E.from_exception(exc))


def create_app(engine: Engine, settings: ServerSettings, *, on_request: RequestLogFn | None = None) -> Starlette:
    settings.check()
    middleware = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
                allow_credentials=False,
                max_age=600,
            )
        )
    else:
        middleware.append(Middleware(RefusePreflight))
    middleware += [Middleware(BodyLimit, limit=settings.max_body_bytes), Middleware(ApiKey, key=settings.api_key)]
    app = Starlette(
        routes=[r for m in ROUTE_MODULES for r in m.routes],
        middleware=middleware,
        exception_handlers={
            E.HTTPError: _handle_http_error,
            MtpStudioError: _handle_engine_error,
            StarletteHTTPException: _handle_starlette,
            Exception: _handle_unexpected,
        },
    )
    app.state.engine = engine
    app.state.settings = settings
    app.state.pending = 0
    app.state.requests = Counter()
    app.state.started = int(time.time())
    # the request log wraps everything, including errors raised by the middleware above
    app.add_middleware(RequestLog, state=app.state, on_request=on_request)
    return app
