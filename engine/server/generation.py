"""Running one chat or text completion request on the engine: streaming (SSE) or not,
usage and llama-server-style ``timings`` (admission, disconnects and keep-alives:
:mod:`engine.server.flow`).

Chat and text completions differ only in how choices are shaped (:class:`Shape`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engine.runtime import jobs as J
from engine.runtime.decode.depth import Mtp
from engine.server import errors as E
from engine.server.flow import PING, Flow, answer
from engine.server.schemas import Parsed

FINGERPRINT = "mtp-studio-0.1.0"


@dataclass(frozen=True)
class Shape:
    object: str
    chunk_object: str
    id_prefix: str
    final: Callable[[J.GenerateResult], dict]  # the result -> its choice
    deltas: Callable[[J.Tokens], list[dict]]  # an engine event -> the streamed choices it makes
    end: Callable[[str], dict]  # finish_reason -> last streamed choice
    logprobs: Callable[[list], dict]  # TokenLogprob list -> the choice's "logprobs"
    #: the first streamed choice, before any text (chat: the role)
    opening: dict | None = None


def usage(res: J.GenerateResult) -> dict:
    return {
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": len(res.tokens),
        "total_tokens": res.prompt_tokens + len(res.tokens),
        # prompt tokens not decoded for this request: the live context's or a snapshot's
        "prompt_tokens_details": {"cached_tokens": res.stats.prompt_tokens_reused},
    }


def timings(res: J.GenerateResult) -> dict:
    """The ``timings`` object llama-server adds to every completion (plus what MTP
    Studio knows about speculation)."""
    s = res.stats
    prompt_n = s.prompt_tokens - s.prompt_tokens_reused
    return {
        "cache_n": s.prompt_tokens_reused,
        "cache_restored_n": s.prompt_tokens_restored,  # of cache_n, restored from a prompt-cache snapshot
        "prompt_n": prompt_n,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": s.prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / (s.prompt_ms / 1000) if s.prompt_ms > 0 else 0.0,
        "predicted_n": s.generated,
        "predicted_ms": s.generation_ms,
        "predicted_per_token_ms": s.generation_ms / s.generated if s.generated else 0.0,
        "predicted_per_second": s.tokens_per_second,
        "draft_n": s.drafted,
        "draft_n_accepted": s.accepted,
        "forced_n": s.forced,  # tokens a grammar forced: chosen by no model
        "speculative": s.mtp is Mtp.ON,
        "sampling": "sampled" if s.sampled else "greedy",
        "draft_depth": s.depth_json,
        # speculation inside the reply's think block and after it
        "thinking": {
            "predicted_n": s.thinking_tokens,
            "draft_n": s.thinking_drafted,
            "draft_n_accepted": s.thinking_accepted,
        },
        "answer": {
            "predicted_n": s.generated - s.thinking_tokens,
            "draft_n": s.drafted - s.thinking_drafted,
            "draft_n_accepted": s.accepted - s.thinking_accepted,
        },
        # drafts by source: the MTP head's, and the conversation's own (suffix drafts)
        "sources": {
            "mtp": {"draft_n": s.drafted - s.suffix_drafted, "draft_n_accepted": s.accepted - s.suffix_accepted},
            "suffix": {"rounds": s.suffix_rounds, "draft_n": s.suffix_drafted, "draft_n_accepted": s.suffix_accepted},
        },
    }


def _with_logprobs(choice: dict, shape: Shape, lps) -> dict:
    if lps is not None:
        choice["logprobs"] = shape.logprobs(list(lps))
    return choice


def chat_logprobs(lps: list) -> dict:
    """OpenAI's chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""

    def entry(piece: bytes, lp: float) -> dict:
        return {"token": piece.decode("utf-8", "replace"), "logprob": lp, "bytes": list(piece)}

    return {
        "content": [dict(entry(t.piece, t.logprob), top_logprobs=[entry(p, lp) for _, p, lp in t.top]) for t in lps]
    }


def completion_logprobs(lps: list) -> dict:
    """The completions API's ``logprobs``: parallel lists of tokens, their log-probabilities,
    the alternatives by text, and each token's offset in the text."""
    offsets, at = [], 0
    for t in lps:
        offsets.append(at)
        at += len(t.piece.decode("utf-8", "replace"))
    return {
        "tokens": [t.piece.decode("utf-8", "replace") for t in lps],
        "token_logprobs": [t.logprob for t in lps],
        "top_logprobs": [{p.decode("utf-8", "replace"): lp for _, p, lp in t.top} for t in lps],
        "text_offset": offsets,
    }


async def run(request: Request, parsed: Parsed, shape: Shape) -> Response:
    cid = f"{shape.id_prefix}{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    def whole(res: J.GenerateResult) -> dict:
        return {
            "id": cid,
            "object": shape.object,
            "created": created,
            "model": parsed.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [_with_logprobs(shape.final(res), shape, res.logprobs)],
            "usage": usage(res),
            "timings": timings(res),
        }

    return await answer(
        request,
        parsed.job,
        stream=parsed.stream,
        result=whole,
        events=lambda flow: _sse(flow, parsed, shape, cid, created),
    )


def _event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


async def _sse(flow: Flow, parsed: Parsed, shape: Shape, cid: str, created: int) -> AsyncIterator[bytes]:
    def chunk(choice: dict | None, **extra: Any) -> bytes:
        data = {
            "id": cid,
            "object": shape.chunk_object,
            "created": created,
            "model": parsed.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [choice] if choice is not None else [],
        }
        if parsed.include_usage:
            data["usage"] = None
        data.update(extra)
        return _event(data)

    try:
        if shape.opening is not None:
            yield chunk(dict(shape.opening))
        async for ev in flow.events():
            if ev is PING:
                yield b": ping\n\n"  # an SSE comment: clients skip it, and their read timeouts restart
            elif isinstance(ev, J.Tokens):
                for i, choice in enumerate(shape.deltas(ev)):
                    yield chunk(_with_logprobs(choice, shape, ev.logprobs if i == 0 else None))
            elif isinstance(ev, J.Failed):
                err = E.from_exception(ev.error)
                yield _event(E.body(err.message, err.type, err.code))
                break
            elif isinstance(ev, J.Done):
                res: J.GenerateResult = ev.result
                yield chunk(shape.end(res.finish_reason), timings=timings(res))
                if parsed.include_usage:
                    yield chunk(None, usage=usage(res))
                break
        yield b"data: [DONE]\n\n"
    finally:
        flow.release()  # the job is cancelled if the client went away mid-stream
