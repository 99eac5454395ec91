"""``llama_batch`` with numpy views, optionally carrying one hidden-state row per token.

An MTP context consumes (token, position, hidden row of the previous position). The
legacy ``llama_batch`` carries both when ``llama_batch_init(n, n_embd, 1)`` allocates
``embd`` and the caller attaches its own token array; the pointer is reset before
``llama_batch_free`` so llama.cpp never frees memory it did not allocate.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.runtime.llama.lib import llama
from engine.runtime.llama.owned import Owned

LOGITS_NONE, LOGITS_LAST, LOGITS_ALL = "none", "last", "all"


class Batch(Owned):
    """A reusable batch of up to ``capacity`` tokens: of sequence ``seq`` (:meth:`set`: a
    session's own batch, whose sequence never changes), or of several (:meth:`append`)."""

    def __init__(self, capacity: int, n_embd: int = 0, seq: int = 0):
        self._own()
        L = llama()
        self.capacity = capacity
        self.n_embd = n_embd
        self._batch = L.llama_batch_init(capacity, n_embd, 1)
        self._own_tokens = None
        if n_embd:
            self._own_tokens = (L.llama_token * capacity)()
            self._batch.token = self._own_tokens
            self.embd = np.ctypeslib.as_array(self._batch.embd, shape=(capacity, n_embd))
        else:
            self.embd = None
        self.tokens = np.ctypeslib.as_array(self._batch.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(self._batch.pos, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(
            ctypes.cast(self._batch.logits, ctypes.POINTER(ctypes.c_int8)), shape=(capacity,)
        )
        n_seq = np.ctypeslib.as_array(self._batch.n_seq_id, shape=(capacity,))
        n_seq[:] = 1
        self.seq = seq
        for i in range(capacity):
            self._batch.seq_id[i][0] = seq
        self._seqs = [seq] * capacity  # each row's sequence id as last written
        self._mixed = False
        self.n = 0
        self.n_logits = 0  # rows that ask for logits

    @property
    def raw(self):
        self._batch.n_tokens = self.n
        return self._batch

    def set(self, tokens, pos0: int, logits: str = LOGITS_LAST, hidden: np.ndarray | None = None) -> None:
        """Fill the batch with ``tokens`` of its sequence at positions ``pos0..``; ``hidden``
        gives one row per token (MTP batches only)."""
        n = len(tokens)
        if n > self.capacity:
            raise ValueError(f"batch of {n} tokens exceeds capacity {self.capacity}")
        if self._mixed:  # rows of other sequences were appended here before
            for j in range(self.capacity):
                self._batch.seq_id[j][0] = self.seq
            self._seqs = [self.seq] * self.capacity
            self._mixed = False
        if n == 1 and hidden is None:  # one token a round (plain decoding): no array temporaries
            self.tokens[0] = tokens[0]
            self.pos[0] = pos0
            self.logits[0] = logits != LOGITS_NONE
            self.n_logits = int(logits != LOGITS_NONE)
            self.n = 1
            return
        self.tokens[:n] = tokens
        self.pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int32)
        if logits == LOGITS_ALL:
            self.logits[:n] = 1
            self.n_logits = n
        else:
            self.n_logits = int(logits == LOGITS_LAST and n > 0)
            self.logits[:n] = 0
            if logits == LOGITS_LAST and n:
                self.logits[n - 1] = 1
        if hidden is not None:
            assert self.embd is not None, "this batch carries no hidden rows"
            self.embd[:n] = hidden
        self.n = n

    def clear(self) -> None:
        self.n = 0
        self.n_logits = 0

    def append(
        self,
        tokens: np.ndarray,
        pos: np.ndarray,
        logits: np.ndarray,
        seq: int,
        hidden: np.ndarray | None = None,
        n_logits: int | None = None,
    ) -> None:
        """Add rows of sequence ``seq`` after those already here (a step of several
        sequences: engine.runtime.slots): tokens, positions, logit flags, hidden rows."""
        n, i = len(tokens), self.n
        if i + n > self.capacity:
            raise ValueError(f"batch of {i + n} tokens exceeds capacity {self.capacity}")
        self.tokens[i : i + n] = tokens
        self.pos[i : i + n] = pos
        self.logits[i : i + n] = logits
        if hidden is not None:
            assert self.embd is not None, "this batch carries no hidden rows"
            self.embd[i : i + n] = hidden
        seq_ids = self._batch.seq_id
        seen = self._seqs
        self._mixed = True
        for j in range(i, i + n):
            if seen[j] != seq:
                seq_ids[j][0] = seq
                seen[j] = seq
        self.n = i + n
        self.n_logits += int(logits.sum()) if n_logits is None else n_logits

    def close(self) -> None:
        free = self._closer()
        self._batch = None
        self._own_tokens = None
        if free is not None:
            free()

    def _closer(self):
        batch, own = getattr(self, "_batch", None), getattr(self, "_own_tokens", None)
        if batch is None:
            return None

        def free() -> None:
            if own is not None:  # our token array, not llama.cpp's: detach it before the free
                batch.token = ctypes.POINTER(llama().llama_token)()
            llama().llama_batch_free(batch)

        return free
