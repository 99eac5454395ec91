"""The one place engine errors become HTTP responses, each in its API's own error shape:

* OpenAI (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``, the rest):
  ``{"error": {"message", "type", "param", "code"}}``;
* Anthropic (``/v1/messages``): ``{"type": "error", "error": {"type", "message"}}``;
* Ollama (``/api/…``): ``{"error": "message"}``.

Which shape a response takes is decided by the request's path (:func:`api_of`), so the
middleware's refusals (API key, body limit, Host guard) speak each client's language too.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from engine.errors import (
    EngineStoppedError,
    InsufficientMemoryError,
    InvalidRequestError,
    MtpStudioError,
    MtpUnavailableError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RpcError,
)

# error class -> (HTTP status, OpenAI error type); the most specific class wins
_STATUS: list[tuple[type[BaseException], int, str]] = [
    (PromptTooLongError, 400, "invalid_request_error"),
    (InvalidRequestError, 400, "invalid_request_error"),
    (MtpUnavailableError, 400, "invalid_request_error"),
    (NoModelLoadedError, 404, "invalid_request_error"),
    (QueueFullError, 429, "rate_limit_error"),
    (EngineStoppedError, 503, "server_error"),
    (RpcError, 503, "server_error"),  # a helper machine is down: retry after reloading
    (
        InsufficientMemoryError,
        503,
        "server_error",
    ),  # a load refused before allocating: free memory or lower the context
]


class HTTPError(Exception):
    """Raised by request handlers for errors that are not engine errors."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers


OPENAI, ANTHROPIC, OLLAMA = "openai", "anthropic", "ollama"

#: Anthropic's error types by HTTP status (docs: "Errors")
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def api_of(path: str) -> str:
    """The API a request path belongs to (its errors take that API's shape)."""
    if path.startswith("/v1/messages"):
        return ANTHROPIC
    if path.startswith("/api/"):
        return OLLAMA
    return OPENAI


def body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def body_for(api: str, err: HTTPError) -> dict:
    """``err`` as ``api``'s error body."""
    if api == ANTHROPIC:
        kind = _ANTHROPIC_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": err.message}}
    if api == OLLAMA:
        return {"error": err.message}
    return body(err.message, err.type, err.code, err.param)


def response(err: HTTPError, path: str = "") -> JSONResponse:
    return JSONResponse(body_for(api_of(path), err), status_code=err.status, headers=err.headers)


def from_exception(exc: BaseException, retry_after_s: int = 2) -> HTTPError:
    if isinstance(exc, HTTPError):
        return exc
    if isinstance(exc, MtpStudioError):
        for cls, status, type_ in _STATUS:
            if isinstance(exc, cls):
                code = "model_not_found" if isinstance(exc, NoModelLoadedError) else exc.code
                headers = {"Retry-After": str(retry_after_s)} if status == 429 else None
                param = getattr(exc, "param", None)
                return HTTPError(status, str(exc), type_=type_, code=code, headers=headers, param=param)
        return HTTPError(500, str(exc), type_="server_error", code=exc.code)
    return HTTPError(500, "Internal server error.", type_="server_error", code="internal_error")


def bad(message: str, param: str | None = None) -> HTTPError:
    """A request's 400: what is wrong with it, and the parameter at fault."""
    return HTTPError(400, message, param=param, code="invalid_request_error" if param is None else "invalid_value")
