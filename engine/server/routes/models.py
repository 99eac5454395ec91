"""GET /v1/models: every model the endpoint serves, loaded or loaded on demand."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.server.ondemand.listing import CHAT, listing

#: LM Studio's model types, by what a model is for
_TYPES = {CHAT: "llm", "embedding": "embeddings", "rerank": "embeddings"}


async def list_models(request: Request):
    st = request.app.state
    data = []
    for m in listing(st):
        data.append(
            {
                "id": m.name,
                "object": "model",
                "created": st.started,
                "owned_by": "mtp-studio",
                # the context a client may fill, under the names clients read it by (vLLM's,
                # LM Studio's, OpenRouter's)
                "context_length": m.context_length,
                "max_model_len": m.context_length,
                "max_context_length": m.context_length,
                # LM Studio's: loaded now, or loaded by the first request that names it
                "state": "loaded" if m.loaded else "not-loaded",
                "type": _TYPES.get(m.kind, "llm"),
                "meta": {
                    "architecture": m.architecture,
                    "n_ctx": m.context_length,
                    "n_vocab": m.info.n_vocab if m.info is not None else None,
                    "mtp": m.mtp,
                    "max_draft_depth": m.info.max_draft_depth if m.info is not None else None,
                    "size_bytes": m.size,
                    "quantization": m.quantization,
                    "capabilities": m.capabilities,
                    # it takes images (a projector is loaded, or paired in the library) / audio
                    "vision": "vision" in m.capabilities,
                    "audio": "audio" in m.capabilities,
                    "kind": m.kind,
                },
            }
        )
    return JSONResponse({"object": "list", "data": data})


routes = [Route("/v1/models", list_models, methods=["GET"])]
