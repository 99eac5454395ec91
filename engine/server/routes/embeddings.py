"""POST /v1/embeddings (OpenAI), /api/embed and /api/embeddings (Ollama), /v1/rerank
(llama-server's and Jina's shape; TEI's with ``texts``): on models that pool, loaded on
demand beside the chat models (engine.runtime.pooled)."""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from engine.runtime import jobs as J
from engine.server import errors as E
from engine.server.flow import job_result
from engine.server.ondemand import hold, on_demand
from engine.server.request import json_body
from engine.server.schemas import bad

#: the longest a pooled job waits behind the engine's other work
POOLED_WAIT_S = 300


def _inputs(raw: Any, name: str = "input") -> tuple[list, bool]:
    """(the inputs, whether one was given bare): a string, a list of strings, a list of
    token ids, or a list of lists of token ids."""
    if isinstance(raw, str):
        return [raw], True
    if isinstance(raw, list) and raw:
        if all(isinstance(x, str) for x in raw):
            return list(raw), False
        if all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
            return [tuple(raw)], True
        if all(
            isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x) for x in raw
        ):
            return [tuple(x) for x in raw], False
    raise bad(
        f"'{name}' must be a string, a list of strings, or token ids (a list of integers, or lists of them)", name
    )


def _dimensions(body: dict) -> int | None:
    d = body.get("dimensions")
    if d is None:
        return None
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise bad("'dimensions' must be a positive integer", "dimensions")
    return d


def _shorten(v: np.ndarray, dims: int | None) -> np.ndarray:
    """The first ``dims`` values, unit length again (Matryoshka embeddings)."""
    if dims is None or dims >= len(v):
        return v
    v = v[:dims]
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


async def _run(request: Request, job: J.Embed | J.Rerank) -> J.PooledResult:
    return await job_result(request, job, POOLED_WAIT_S, "The request")


async def _held(request: Request) -> dict:
    """The request's body, its model named, loaded on demand and leased for the request
    (engine.server.ondemand); ``body["model"]`` is then the loaded name."""
    body = await json_body(request)
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    m = body.get("model")
    if not isinstance(m, str) or not m:
        raise bad("'model' is required (see GET /v1/models)", "model")
    loaded = await hold(request, body)  # body["model"] becomes the loaded name
    if body["model"] not in loaded:
        raise E.HTTPError(404, f"The model '{m}' is not loaded.", code="model_not_found", param="model")
    return body


@on_demand
async def openai_embeddings(request: Request):
    body = await _held(request)
    inputs, _ = _inputs(body.get("input"))
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise bad("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    dims = _dimensions(body)
    res = await _run(request, J.Embed(body["model"], tuple(inputs)))
    data = []
    for i, v in enumerate(res.vectors):
        v = _shorten(v, dims).astype(np.float32)
        emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") if fmt == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": res.tokens, "total_tokens": res.tokens},
        }
    )


@on_demand
async def ollama_embed(request: Request):
    t0 = time.perf_counter_ns()
    body = await _held(request)
    t_loaded = time.perf_counter_ns()
    inputs, _ = _inputs(body.get("input"))
    truncate = body.get("truncate", True)
    if not isinstance(truncate, bool):
        raise bad("'truncate' must be true or false", "truncate")
    dims = _dimensions(body)
    res = await _run(request, J.Embed(body["model"], tuple(inputs), truncate=truncate))
    return JSONResponse(
        {
            "model": body["model"],
            "embeddings": [_shorten(v, dims).tolist() for v in res.vectors],
            "total_duration": time.perf_counter_ns() - t0,
            "load_duration": t_loaded - t0,
            "prompt_eval_count": res.tokens,
        }
    )


@on_demand
async def ollama_embeddings(request: Request):
    """Ollama's older ``/api/embeddings``: one ``prompt``, one ``embedding``."""
    body = await _held(request)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise bad("'prompt' must be a string", "prompt")
    res = await _run(request, J.Embed(body["model"], (prompt,)))
    return JSONResponse({"embedding": res.vectors[0].tolist()})


@on_demand
async def rerank(request: Request):
    body = await _held(request)
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise bad("'query' must be a non-empty string", "query")
    tei = "texts" in body and "documents" not in body  # Hugging Face TEI's shape
    docs = body.get("texts" if tei else "documents")
    if isinstance(docs, list) and all(isinstance(d, dict) and isinstance(d.get("text"), str) for d in docs):
        docs = [d["text"] for d in docs]  # Cohere's {"text": ...} documents
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise bad("'documents' must be a non-empty list of strings", "documents")
    top_n = body.get("top_n", len(docs))
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise bad("'top_n' must be a positive integer", "top_n")
    res = await _run(request, J.Rerank(body["model"], query, tuple(docs)))
    order = sorted(range(len(docs)), key=lambda i: -res.scores[i])[:top_n]
    if tei:
        return JSONResponse([{"index": i, "score": res.scores[i]} for i in order])
    results = []
    for i in order:
        r: dict = {"index": i, "relevance_score": res.scores[i]}
        if body.get("return_documents"):
            r["document"] = {"text": docs[i]}
        results.append(r)
    return JSONResponse(
        {
            "model": body["model"],
            "object": "list",
            "results": results,
            "usage": {"prompt_tokens": res.tokens, "total_tokens": res.tokens},
        }
    )


routes = [
    Route("/v1/embeddings", openai_embeddings, methods=["POST"]),
    Route("/embeddings", openai_embeddings, methods=["POST"]),
    Route("/api/embed", ollama_embed, methods=["POST"]),
    Route("/api/embeddings", ollama_embeddings, methods=["POST"]),
    Route("/v1/rerank", rerank, methods=["POST"]),
    Route("/rerank", rerank, methods=["POST"]),
    Route("/v1/reranking", rerank, methods=["POST"]),
]
