"""GET /v1/models"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def list_models(request: Request):
    st = request.app.state
    data = [
        {
            "id": name,
            "object": "model",
            "created": st.started,
            "owned_by": "mtp-studio",
            # the context a client may fill, under the names clients read it by (vLLM's,
            # LM Studio's, OpenRouter's)
            "context_length": info.get("n_ctx"),
            "max_model_len": info.get("n_ctx"),
            "max_context_length": info.get("n_ctx"),
            "meta": {
                "architecture": info.get("architecture"),
                "n_ctx": info.get("n_ctx"),
                "n_vocab": info.get("n_vocab"),
                "mtp": info.get("mtp"),
                "max_draft_depth": info.get("max_draft_depth"),
            },
        }
        for name, info in st.engine.models().items()
    ]
    return JSONResponse({"object": "list", "data": data})


routes = [Route("/v1/models", list_models, methods=["GET"])]
