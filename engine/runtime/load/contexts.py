"""The contexts a loaded model decodes with: the target's and the MTP head's, each of
``parallel`` sequences, a session per slot over views of them (:mod:`engine.runtime.slots`), or
a pooling model's one context (:mod:`engine.runtime.pooled`). Built by the loader
(:func:`engine.runtime.load.loader.load`) on the thread that loads."""

from __future__ import annotations

from typing import Protocol

from engine.gguf.memory import logit_rows
from engine.runtime import limits
from engine.runtime.decode.session import Session
from engine.runtime.llama.context import Context
from engine.runtime.llama.model import Model
from engine.runtime.load.source import MtpSource
from engine.runtime.slots.batcher import Batcher
from engine.runtime.slots.pool import SlotPool
from engine.runtime.slots.seqcontext import SeqContext


class ContextSpec(Protocol):
    """What the contexts are made from (a :class:`~engine.runtime.load.loader.LoadSpec`)."""

    parallel: int
    n_ctx: int
    n_batch: int
    n_threads: int | None
    max_draft_depth: int
    exact: bool
    logit_rows: int | None


#: a pooled context's size (its batch: one input's most tokens) and the inputs one decode takes
POOLED_MAX_BATCH = 8192
POOLED_SEQS = 16


def make_contexts(
    spec: ContextSpec,
    source: MtpSource,
    model: Model,
    head_model: Model | None,
    *,
    local_kv: bool = False,
    heads: int = 1,
    holes_ok: bool = True,
    pooled: bool = False,
) -> tuple[Session, SlotPool | None, tuple[Context, ...]]:
    """The target and MTP contexts of ``spec.parallel`` sequences, a session per slot over
    views of them (:mod:`engine.runtime.slots`: one sequence alone is a batch of one, the
    same path), and the shared contexts (the MTP one first); a pooling model's one context."""
    use_mtp = source != MtpSource.OFF
    n_seq = spec.parallel
    n_ctx = limits.effective_ctx(spec.n_ctx, model.n_ctx_train)
    depth = max(1, spec.max_draft_depth)
    n_batch = limits.batch_for(spec.n_batch, depth, n_ctx)
    if pooled:
        # every input in one decode (an encoder attends over all of it at once), several
        # inputs to a decode as sequences of one unified cache (engine.runtime.pooled)
        n_ctx = n_batch = min(n_ctx, POOLED_MAX_BATCH)
        target = Context(
            model,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=spec.n_threads,
            n_outputs=n_batch,
            n_seq=POOLED_SEQS,
            pooled=True,
        )
        return Session(target, None), None, ()
    target = Context(
        model,
        n_ctx=n_ctx,
        n_batch=n_batch,
        n_rs_seq=depth if use_mtp else 0,
        nextn_embeddings=use_mtp,
        n_threads=spec.n_threads,
        exact=spec.exact,
        n_outputs=(spec.logit_rows or logit_rows(depth, model.n_vocab)) * n_seq,
        n_seq=n_seq,
    )
    try:
        limits.check_context_sizes(
            n_ubatch=target.n_ubatch, n_batch=target.n_batch, n_rs_seq=target.n_rs_seq, depth=depth if use_mtp else 0
        )
    except BaseException:
        target.close()
        raise
    draft = None
    if use_mtp:
        try:
            draft = Context(
                head_model if head_model is not None else model,
                n_ctx=n_ctx,
                n_batch=n_batch,
                mtp_target=target,
                nextn_embeddings=True,
                n_threads=spec.n_threads,
                offload_kqv=not local_kv,  # with RPC devices: the draft's KV cache stays on this machine
                n_outputs=n_seq,
                n_seq=n_seq,
            )
        except BaseException:
            target.close()
            raise
    batcher = Batcher(target, draft)
    sessions = [
        Session(
            SeqContext(target, i, batcher),
            SeqContext(draft, i, batcher) if draft is not None else None,
            heads=heads,
            holes_ok=holes_ok,
        )
        for i in range(n_seq)
    ]
    shared = (draft, target) if draft is not None else (target,)
    return sessions[0], SlotPool(batcher, sessions), shared
