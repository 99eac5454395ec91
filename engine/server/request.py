"""Reading request bodies (size-limited by the app's middleware)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from engine.server.errors import HTTPError


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        raise HTTPError(400, "The request body is empty; send a JSON object.", code="invalid_json")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise HTTPError(400, f"The request body is not valid JSON: {e}", code="invalid_json") from None
