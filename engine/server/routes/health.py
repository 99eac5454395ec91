"""GET /health (no API key needed): 200 when a model is ready, 503 otherwise."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def health(request: Request):
    models = list(request.app.state.engine.models())
    if not models:
        return JSONResponse({"status": "no model loaded"}, status_code=503)
    return JSONResponse({"status": "ok", "models": models})


routes = [Route("/health", health, methods=["GET"])]
