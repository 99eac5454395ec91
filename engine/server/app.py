"""The OpenAI-compatible endpoint, built by :func:`create_app` over a running engine.

Stack: Starlette (the ASGI core FastAPI stands on) served by uvicorn; see docs/endpoint.md
for why not FastAPI itself. Routes live one per module in ``routes/``; state lives on
``app.state``. Middleware, outermost first: request log (method, path, status, time —
never headers or bodies, so no key is ever logged), request guard (``Host`` allowlist
against DNS rebinding, foreign ``Origin`` refused, JSON-only POSTs so a web page cannot
send a CORS-free "simple" request), CORS (off unless an explicit allowlist is set), body
size limit and read deadline, API key.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass
from collections import Counter
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.errors import MtpStudioError
from engine.runtime.engine import Engine
from engine.server import errors as E
from engine.server.routes import chat, completions, embeddings, health, messages, metrics, models, ollama, responses
from engine.server.settings import ServerSettings

log = logging.getLogger("mtp_studio.server")

ROUTE_MODULES = (models, chat, completions, responses, messages, ollama, embeddings, health, metrics)
PUBLIC_PATHS = {"/health", "/api/version"}


@dataclass(frozen=True)
class RequestEntry:
    """One finished request, as the request log reports it: never headers, bodies or keys."""

    time: float  # when it ended (epoch seconds)
    method: str
    path: str
    #: which API it spoke (engine.server.errors.api_of): openai | anthropic | ollama
    api: str
    status: int
    ms: float
    client: str


RequestLogFn = Callable[[RequestEntry], None]


def _send_error(err: E.HTTPError, scope: dict | None = None):
    return E.response(err, scope["path"] if scope is not None else "")


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
            route = path if path in _KNOWN else _ROUTE_PREFIX.get(path.rsplit("/", 1)[0], "other")
            self.state.requests[(route, status["code"])] += 1
            api = E.api_of(path)
            self.state.api_requests[api] += 1
            entry = RequestEntry(
                time.time(),
                scope["method"],
                path,
                api,
                status["code"],
                (time.perf_counter() - t0) * 1000,
                (scope.get("client") or ("?", 0))[0],
            )
            log.info("%s %s %s %.0f ms", entry.method, path, entry.status, entry.ms)
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
                resp = _send_error(
                    E.HTTPError(
                        403, "CORS is off for this endpoint; allow your origin in its settings.", code="cors_disabled"
                    ),
                    scope,
                )
                return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


class RequestGuard:
    """Refuses what a web page could send: a ``Host`` this endpoint does not answer to
    (DNS rebinding), an ``Origin`` not allowed by CORS, a POST that is not JSON."""

    def __init__(self, app, settings: ServerSettings):
        self.app = app
        self.settings = settings
        self.origins = set(settings.cors_origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k: v for k, v in scope["headers"]}
        err = None
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        if not self.settings.host_allowed(host):
            err = E.HTTPError(
                400,
                f"This endpoint does not answer to the host name {host!r}. Use 127.0.0.1 or localhost, "
                "or add the name to the endpoint's allowed hosts.",
                code="invalid_host",
            )
        elif origin is not None and origin.decode("latin-1") not in self.origins:
            err = E.HTTPError(
                403,
                f"Requests from the web origin {origin.decode('latin-1')!r} are not allowed; "
                "add it to the endpoint's CORS origins to allow it.",
                code="origin_not_allowed",
            )
        elif scope["method"] == "POST":
            ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if ctype != b"application/json":
                err = E.HTTPError(
                    415,
                    "Send the request body as JSON with 'Content-Type: application/json'.",
                    code="unsupported_media_type",
                )
        if err is not None:
            return await _send_error(err, scope)(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    """Caps the body size and how long a client may take to send each part of it."""

    def __init__(self, app, limit: int, timeout: float = 30.0):
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = _send_error(
            E.HTTPError(413, f"The request body is larger than {self.limit} bytes.", code="request_too_large"), scope
        )
        for k, v in scope["headers"]:
            if k == b"content-length" and v.isdigit() and int(v) > self.limit:
                return await too_big(scope, receive, send)
        seen = 0
        body_done = False

        async def limited():
            nonlocal seen, body_done
            if body_done:  # afterwards the app waits for a disconnect: no deadline
                return await receive()
            try:
                msg = await asyncio.wait_for(receive(), self.timeout)
            except asyncio.TimeoutError:
                raise _TooSlow() from None
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
                body_done = not msg.get("more_body", False)
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await too_big(scope, receive, send)
        except _TooSlow:
            await _send_error(
                E.HTTPError(408, f"The request body did not arrive within {self.timeout:g} s.", code="request_timeout"),
                scope,
            )(scope, receive, send)


class _TooLarge(Exception):
    pass


class _TooSlow(Exception):
    pass


class ApiKey:
    """The key in ``Authorization: Bearer`` (OpenAI, Ollama clients) or ``x-api-key``
    (Anthropic clients)."""

    def __init__(self, app, key: str | None):
        self.app = app
        self.key = key.encode() if key else None

    async def __call__(self, scope, receive, send):
        if self.key is None or scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["method"] == "OPTIONS":
            return await self.app(scope, receive, send)
        got, tokens = b"", []
        for k, v in scope["headers"]:
            if k == b"authorization":
                got = v
                scheme, _, t = v.partition(b" ")
                if scheme.lower() == b"bearer":
                    tokens.append(t.strip())
            elif k == b"x-api-key":
                got = got or v
                tokens.append(v.strip())
        # every candidate compared (timing-safe); either header may carry the key
        ok = [hmac.compare_digest(t, self.key) for t in tokens]
        if not any(ok):
            msg = (
                "Missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."
                if not got
                else "Incorrect API key."
            )
            resp = _send_error(
                E.HTTPError(401, msg, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}), scope
            )
            return await resp(scope, receive, send)
        return await self.app(scope, receive, send)


_KNOWN = {r.path for m in ROUTE_MODULES for r in m.routes}
#: routes with a parameter at the end, by what comes before it
_ROUTE_PREFIX = {r.path.rsplit("/", 1)[0]: r.path for m in ROUTE_MODULES for r in m.routes if r.path.endswith("}")}


async def _handle_http_error(request: Request, exc: E.HTTPError) -> JSONResponse:
    return E.response(exc, request.url.path)


async def _handle_engine_error(request: Request, exc: MtpStudioError) -> JSONResponse:
    return E.response(E.from_exception(exc, request.app.state.settings.retry_after_s), request.url.path)


async def _handle_starlette(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    msg = {404: f"No route {request.url.path}.", 405: f"{request.method} is not allowed on {request.url.path}."}
    err = E.HTTPError(exc.status_code, msg.get(exc.status_code, str(exc.detail)), code=f"http_{exc.status_code}")
    return E.response(err, request.url.path)


async def _handle_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s", request.url.path)
    return E.response(E.from_exception(exc), request.url.path)


def create_app(
    engine: Engine, settings: ServerSettings, *, on_request: RequestLogFn | None = None, residency=None
) -> Starlette:
    settings.check()
    middleware = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "x-api-key", "anthropic-version"],
                allow_credentials=False,
                max_age=600,
            )
        )
    else:
        middleware.append(Middleware(RefusePreflight))
    middleware.insert(0, Middleware(RequestGuard, settings=settings))
    middleware += [
        Middleware(BodyLimit, limit=settings.max_body_bytes, timeout=settings.body_timeout_s),
        Middleware(ApiKey, key=settings.api_key),
    ]
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
    #: loads models by name on demand (engine.runtime.ondemand.Residency); None: serve what is loaded
    app.state.residency = residency
    app.state.settings = settings
    app.state.pending = 0
    app.state.requests = Counter()
    app.state.api_requests = Counter()  # by API: openai, anthropic, ollama
    app.state.started = int(time.time())
    # the request log wraps everything, including errors raised by the middleware above
    app.add_middleware(RequestLog, state=app.state, on_request=on_request)
    return app
