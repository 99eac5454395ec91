"""``llama_batch`` of embedding rows: a slice of one media chunk, decoded into the target.

A batch of embeddings has no token ids (llama.cpp reads ``embd`` when ``token`` is NULL)
and, under M-RoPE, four positions per row laid out section-major (``pos[j * n + i]``:
llama.cpp's ``llama_batch_compat``): its position array is this object's own, ``capacity ×
sections`` long, put in place of llama.cpp's (``capacity`` long) and taken out again before
``llama_batch_free``.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.runtime.llama.lib import llama
from engine.runtime.llama.owned import Owned
from engine.runtime.media.projector import MediaChunk


class MediaBatch(Owned):
    """Up to ``capacity`` embedding rows of width ``n_embd`` for sequence ``seq``."""

    #: a slot's decode of it is a call of its own (engine.runtime.slots.seqcontext)
    embd_rows = True

    def __init__(self, capacity: int, n_embd: int, sections: int, seq: int = 0):
        self._own()
        L = llama()
        self.capacity, self.n_embd, self.sections, self.seq = capacity, n_embd, sections, seq
        self._batch = L.llama_batch_init(capacity, n_embd, 1)  # embd set, token NULL
        # the address (a field read from a ctypes structure follows later writes to it)
        self._their_pos = ctypes.cast(self._batch.pos, ctypes.c_void_p).value
        self._own_pos = (L.llama_pos * (capacity * sections))()
        self._batch.pos = self._own_pos
        self.embd = np.ctypeslib.as_array(self._batch.embd, shape=(capacity, n_embd))
        self.pos = np.ctypeslib.as_array(self._own_pos, shape=(capacity * sections,))
        self.logits = np.ctypeslib.as_array(
            ctypes.cast(self._batch.logits, ctypes.POINTER(ctypes.c_int8)), shape=(capacity,)
        )
        np.ctypeslib.as_array(self._batch.n_seq_id, shape=(capacity,))[:] = 1
        for i in range(capacity):
            self._batch.seq_id[i][0] = seq
        self.n = 0
        self.n_logits = 0
        #: decode with non-causal attention (Gemma's vision): llama.cpp's causal flag is off
        #: for this decode only (engine.runtime.llama.context.Context.decode)
        self.non_causal = False

    def fill(self, chunk: MediaChunk, start: int, stop: int, p0: int, *, logits_last: bool) -> None:
        """Rows ``start..stop`` of ``chunk``, whose first row sits at position ``p0``."""
        n = stop - start
        if not 0 < n <= self.capacity:
            raise ValueError(f"a media batch of {n} rows does not fit capacity {self.capacity}")
        if chunk.embd.shape[1] != self.n_embd:
            raise ValueError(f"media rows are {chunk.embd.shape[1]} wide; the model takes {self.n_embd}")
        self.embd[:n] = chunk.embd[start:stop]
        pos = chunk.positions(p0, start, stop)
        if len(pos) != self.sections:
            raise ValueError(f"media rows carry {len(pos)} position sections; the model takes {self.sections}")
        self.pos[: n * self.sections] = pos.reshape(-1)
        self.logits[:n] = 0
        if logits_last:
            self.logits[n - 1] = 1
        self.n, self.n_logits = n, int(logits_last)
        self.non_causal = chunk.non_causal

    @property
    def raw(self):
        self._batch.n_tokens = self.n
        return self._batch

    def clear(self) -> None:
        self.n = self.n_logits = 0

    def close(self) -> None:
        free = self._closer()
        self._batch = None
        self._own_pos = None
        if free is not None:
            free()

    def _closer(self):
        batch, theirs = getattr(self, "_batch", None), getattr(self, "_their_pos", None)
        if batch is None:
            return None

        def free() -> None:
            # llama.cpp frees the array it allocated, not ours
            batch.pos = ctypes.cast(theirs, ctypes.POINTER(llama().llama_pos))
            llama().llama_batch_free(batch)

        return free


def batch_for(b: MediaBatch | None, chunk: MediaChunk, n: int, n_batch: int, seq: int) -> MediaBatch:
    """``b`` when it can hold ``n`` rows of ``chunk``'s shape, else a new batch (``b`` closed)."""
    width, sections = chunk.embd.shape[1], len(chunk.rel_pos)
    if b is not None and b.capacity >= n and b.sections == sections and b.n_embd == width and b.seq == seq:
        return b
    if b is not None:
        b.close()
    return MediaBatch(max(n, n_batch), width, sections, seq)
