"""Reading request bodies (size-limited by the app's middleware).

A body is parsed, then walked once: nesting deeper than :data:`MAX_DEPTH` and strings
that are not valid Unicode (a lone surrogate such as ``"\\ud800"`` is valid JSON but
cannot be encoded) are 400s that say so, never a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from engine.server.errors import HTTPError

#: deepest nesting of arrays/objects accepted (chat messages need about 4)
MAX_DEPTH = 32


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise HTTPError(400, "The request body is empty; send a JSON object.", code="invalid_json")
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise HTTPError(400, f"The request body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:
        raise HTTPError(
            400, f"The request body is nested too deeply (at most {MAX_DEPTH} levels).", code="invalid_json"
        ) from None
    check_values(body)
    return body


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def check_values(value: Any, path: str = "body", depth: int = 0) -> None:
    """Reject nesting beyond :data:`MAX_DEPTH` and strings with unpaired surrogates."""
    if depth > MAX_DEPTH:
        raise HTTPError(
            400, f"The request body is nested too deeply (at most {MAX_DEPTH} levels).", code="invalid_json"
        )
    if isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_text(k, path)
            check_values(v, f"{path}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_values(v, f"{path}[{i}]", depth + 1)


def _check_text(s: str, path: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise HTTPError(
            400,
            f"{path} holds an unpaired UTF-16 surrogate, which is not text; send valid Unicode.",
            code="invalid_json",
        ) from None
