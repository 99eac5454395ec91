"""One sequence of a shared context, with the interface of a whole one.

A :class:`~engine.runtime.decode.session.Session` drives a :class:`SeqContext` exactly as
it drives a :class:`~engine.runtime.llama.context.Context` made for it alone: decode a
batch, read its logits and hidden rows, roll back, clear, snapshot. Decodes go through
the model's :class:`~engine.runtime.slots.batcher.Batcher` (one step for every sequence);
the other calls act on this sequence only (``seq_id``), under the batcher's lock. Rows
read after a decode are this sequence's, in its own batch order.
"""

from __future__ import annotations

import numpy as np

from engine.errors import DecodeError
from engine.runtime.llama.batch import Batch
from engine.runtime.llama.context import Context
from engine.runtime.slots.batcher import Batcher, StepRows


#: most prompt rows a sequence decodes in one step while others decode too (a step of
#: 128 prompt rows costs the 200 MB bench model about as much as 4 sequences' verify rows)
PROMPT_ROWS_BESIDE_OTHERS = 128


class SeqContext:
    def __init__(self, ctx: Context, seq: int, batcher: Batcher):
        self.ctx = ctx
        self.seq = seq
        self.batcher = batcher
        self.model = ctx.model
        #: the positions this sequence may hold (each sequence has a stream of its own)
        self.n_ctx = ctx.n_ctx_seq
        self.n_ubatch = ctx.n_ubatch
        self.n_rs_seq = ctx.n_rs_seq
        #: logit rows one of this sequence's decodes may read (its share of the context's)
        self.n_outputs = max(1, ctx.n_outputs // ctx.n_seq)
        self.is_mtp = ctx.is_mtp
        self.shares_memory = ctx.shares_memory
        self._head = 0
        self._req: StepRows | None = None

    @property
    def n_batch(self) -> int:
        """Rows one decode of this sequence may carry: the context's batch alone; beside
        other sequences a prompt goes in chunks of :data:`PROMPT_ROWS_BESIDE_OTHERS`, so a
        request that joins stalls the running streams' steps by that much at most."""
        if self.batcher.active > 1:
            return min(self.ctx.n_batch, PROMPT_ROWS_BESIDE_OTHERS)
        return self.ctx.n_batch

    # ------------------------------------------------------------------ decode
    def set_nextn_embeddings(self, on: bool) -> None:
        """The shared context yields hidden rows whenever MTP runs on any sequence: a
        sequence that does not read them just leaves them."""
        if on:
            with self.batcher.lock:
                self.ctx.set_nextn_embeddings(True)

    @property
    def nextn_embeddings(self) -> bool:
        return self.ctx.nextn_embeddings

    def set_nextn_layer_offset(self, head: int) -> None:
        self._head = int(head)  # the batcher runs each head's decodes apart

    def decode(self, batch: Batch) -> None:
        n = batch.n
        if n == 0:
            return
        if batch.n_logits > self.n_outputs:
            raise DecodeError(
                f"a decode asked for {batch.n_logits} logit rows; this sequence may read at most {self.n_outputs}"
            )
        if getattr(batch, "embd_rows", False):  # a media chunk's rows: decoded as they are, in a call of their own
            req = StepRows(
                self.ctx, self.seq, np.zeros(n, np.int32), batch.pos[:n], batch.logits[:n], n_logits=batch.n_logits
            )
            req.batch, req.media = batch, True
            self._req = None
            self.batcher.submit(req)
            self._req = req
            return
        # views of the session's own batch: the sequence waits for the step that decodes
        # them and touches nothing meanwhile, so its rows are copied once, into the step's batch
        req = StepRows(
            self.ctx,
            self.seq,
            batch.tokens[:n],
            batch.pos[:n],
            batch.logits[:n],
            batch.embd[:n] if batch.embd is not None and self.is_mtp else None,
            self._head,
            n_logits=batch.n_logits,
            batch=batch if batch.seq == self.seq else None,
        )
        self._req = None
        self.batcher.submit(req)
        self._req = req

    @property
    def step_rows(self) -> int:
        """Rows the step of this sequence's last decode carried, every sequence's."""
        return self._req.step_rows if self._req is not None else 0

    def _out(self) -> StepRows:
        if self._req is None:
            raise DecodeError("no logits: nothing was decoded on this sequence")
        return self._req

    def logits(self, i: int) -> np.ndarray:
        r = self._out()
        rows = r.out_logits
        n = 0 if rows is None else len(rows)
        if not -n <= i < n:
            raise DecodeError(f"no logits for row {i}")
        return rows[i]  # type: ignore[index]

    def argmax(self, i: int) -> int:
        return int(self.logits(i).argmax())

    def argmax_rows(self, n: int) -> list[int]:
        rows = self._out().out_logits
        if rows is None or n > len(rows):
            raise DecodeError(f"no logits for row {n - 1}")
        return rows[:n].argmax(axis=1).tolist()

    def hidden_rows(self, n: int) -> np.ndarray:
        h = self._out().out_hidden
        if h is None:
            raise DecodeError("no hidden states: nextn embeddings are not enabled on this context")
        return h[:n]

    def hidden_row(self, i: int) -> np.ndarray:
        return self.hidden_rows(i + 1)[i]

    # ------------------------------------------------------------------ memory
    def seq_rm(self, p0: int, p1: int = -1) -> bool:
        with self.batcher.lock:
            return self.ctx.seq_rm(p0, p1, seq=self.seq)

    def clear(self) -> None:
        with self.batcher.lock:
            self.ctx.clear_seq(self.seq)

    def state_get(self) -> bytearray:
        with self.batcher.lock:
            return self.ctx.state_get(self.seq)

    def state_set(self, data: bytearray) -> None:
        with self.batcher.lock:
            self.ctx.state_set(data, self.seq)

    def partial_get(self) -> bytearray:
        with self.batcher.lock:
            return self.ctx.partial_get(self.seq)

    def partial_set(self, data: bytearray) -> bool:
        with self.batcher.lock:
            return self.ctx.partial_set(data, self.seq)

    def close(self) -> None:
        """The shared context belongs to the pool, which closes it."""
