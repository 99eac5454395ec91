"""One embeddings or rerank job on an in-process model: a :class:`~engine.runtime.jobs.Embed`
or :class:`~engine.runtime.jobs.Rerank` met with its model, its inputs tokenized (cut to
what one decode takes when asked), pooled (:mod:`engine.runtime.pooled`) and returned.
Engine thread (between the chat streams' steps: a pooling model has no streams)."""

from __future__ import annotations

import threading
import time

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime import pooled
from engine.runtime.load.loader import LoadedModel
from engine.runtime.modelinfo import EMBEDDING, RERANK


def run_pooled(job: J.Embed | J.Rerank, lm, cancel: threading.Event | None = None) -> J.PooledResult:
    """``job`` on ``lm``: refused in words unless ``lm`` pools the way the job needs."""
    kind = lm.info.kind
    want = RERANK if isinstance(job, J.Rerank) else EMBEDDING
    if not isinstance(lm, LoadedModel) or kind != want:
        raise InvalidRequestError(refusal(lm.name, kind, want))
    t0 = time.perf_counter()
    ctx, model = lm.session.target, lm.model
    limit = ctx.n_batch

    def cut(toks: list[int]) -> list[int]:
        return toks[:limit] if job.truncate else toks

    if isinstance(job, J.Rerank):
        inputs = [cut(pooled.rerank_tokens(model, job.query, d)) for d in job.documents]
        out = pooled.embed(ctx, inputs, normalize=False, cancel=cancel)
        return J.PooledResult(
            scores=[float(p.vector[0]) for p in out],
            tokens=sum(p.n_tokens for p in out),
            ms=(time.perf_counter() - t0) * 1000,
        )
    inputs = [
        cut(list(x) if not isinstance(x, str) else model.tokenize(x, add_special=True, parse_special=True))
        for x in job.inputs
    ]
    out = pooled.embed(ctx, inputs, normalize=job.normalize, cancel=cancel)
    return J.PooledResult(
        vectors=[p.vector for p in out], tokens=sum(p.n_tokens for p in out), ms=(time.perf_counter() - t0) * 1000
    )


def refusal(name: str, kind: str, want: str) -> str:
    """Why model ``name`` (a ``kind`` model) cannot answer a ``want`` request, and what to use."""
    what = {"chat": "a chat model", "embedding": "an embedding model", "rerank": "a reranking model"}
    use = {
        "chat": "/v1/chat/completions (or /api/chat)",
        "embedding": "/v1/embeddings (or /api/embed)",
        "rerank": "/v1/rerank",
    }
    need = {
        "chat": "a chat model",
        "embedding": "an embedding model (a GGUF that sets a pooling type)",
        "rerank": "a reranking model (a GGUF with rank pooling)",
    }
    return f"{name} is {what.get(kind, kind)}: it answers {use.get(kind, kind)}. This request needs {need[want]}."
