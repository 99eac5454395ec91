"""Embeddings and reranking: models whose GGUF sets a pooling type.

Such a model is loaded with one context that pools (llama.cpp's ``embeddings`` on, its
pooling the file's own), no drafting and no chat. :func:`embed` decodes texts as whole
sequences, several to a decode (each its own sequence id, every row an output, as
llama.cpp requires), and reads each sequence's pooled vector: ``n_embd`` floats, or under
rank pooling the classifier's scores. :func:`rerank_tokens` builds a reranker's input
for a query and a document as llama-server does: the file's ``rerank`` chat template
when it has one, else ``BOS query EOS SEP document EOS`` (each special token as the
vocabulary adds it).

Engine thread only (the context is the model's): the engine runs these as jobs between
the chat streams' steps, since they touch no other model.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from engine.errors import Cancelled, InvalidRequestError, PromptTooLongError
from engine.runtime.llama.batch import Batch
from engine.runtime.llama.lib import llama

#: llama.cpp's pooling types (include/llama.h)
POOLING = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}
RANK = 4


@dataclass(frozen=True)
class Pooled:
    """One input's result: its vector (unit length when normalized) and its tokens."""

    vector: np.ndarray
    n_tokens: int


def pooling_of(ctx) -> int:
    return int(llama().llama_pooling_type(ctx.ptr))


def embed(
    ctx, inputs: list[list[int]], *, normalize: bool = True, cancel: threading.Event | None = None
) -> list[Pooled]:
    """Each input's pooled vector (``n_embd`` floats; under rank pooling, the classifier's
    outputs). Inputs longer than the context's batch are refused in words (the caller
    truncates first when asked to)."""
    L = llama()
    rank = pooling_of(ctx) == RANK
    width = max(1, int(L.llama_model_n_cls_out(ctx.model.ptr))) if rank else ctx.model.n_embd_out
    n_batch, n_seq = ctx.n_batch, ctx.n_seq
    for i, toks in enumerate(inputs):
        if not toks:
            raise InvalidRequestError(f"input {i} is empty: there is nothing to embed")
        if len(toks) > n_batch:
            raise PromptTooLongError(
                f"input {i} is {len(toks)} tokens; this model embeds at most {n_batch} at once. Shorten it, or let the "
                "endpoint cut it (truncate)."
            )
    out: list[Pooled] = []
    batch = Batch(n_batch)
    try:
        i = 0
        while i < len(inputs):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            group: list[list[int]] = []
            total = 0
            while i < len(inputs) and len(group) < n_seq and total + len(inputs[i]) <= n_batch:
                group.append(inputs[i])
                total += len(inputs[i])
                i += 1
            ctx.clear()
            batch.clear()
            for s, toks in enumerate(group):
                n = len(toks)
                batch.append(
                    np.asarray(toks, dtype=np.int32), np.arange(n, dtype=np.int32), np.ones(n, dtype=np.int8), s
                )
            ctx.decode(batch)
            for s, toks in enumerate(group):
                ptr = L.llama_get_embeddings_seq(ctx.ptr, s)
                if not ptr:
                    raise InvalidRequestError("llama.cpp returned no pooled embedding for this model")
                v = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(width,)).copy()
                if normalize and not rank:
                    norm = float(np.linalg.norm(v))
                    if norm > 0:
                        v = v / norm
                out.append(Pooled(v, len(toks)))
    finally:
        batch.close()
        ctx.clear()
    return out


def rerank_tokens(model, query: str, document: str) -> list[int]:
    """A reranker's input for one pair, as llama-server builds it (format_prompt_rerank)."""
    template = model.meta("tokenizer.chat_template.rerank")
    if template:
        text = template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(text, add_special=False, parse_special=True)
    L = llama()
    vocab = model._vocab
    eos = int(L.llama_vocab_eos(vocab))
    if eos < 0:
        eos = int(L.llama_vocab_sep(vocab))
    toks: list[int] = []
    if L.llama_vocab_get_add_bos(vocab):
        toks.append(int(L.llama_vocab_bos(vocab)))
    toks += model.tokenize(query, add_special=False, parse_special=False)
    if L.llama_vocab_get_add_eos(vocab):
        toks.append(eos)
    if L.llama_vocab_get_add_sep(vocab):
        toks.append(int(L.llama_vocab_sep(vocab)))
    toks += model.tokenize(document, add_special=False, parse_special=False)
    if L.llama_vocab_get_add_eos(vocab):
        toks.append(eos)
    return toks
