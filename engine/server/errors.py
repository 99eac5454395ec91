"""The one place engine errors become HTTP responses, in OpenAI's error JSON shape:
``{"error": {"message", "type", "param", "code"}}``."""

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
    (InsufficientMemoryError, 503, "server_error"),  # a load refused before allocating: free memory or lower the context
]


class HTTPError(Exception):
    """Raised by request handlers for errors that are not engine errors."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None):  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers


def body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def response(err: HTTPError) -> JSONResponse:
    return JSONResponse(body(err.message, err.type, err.code, err.param), status_code=err.status, headers=err.headers)


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
