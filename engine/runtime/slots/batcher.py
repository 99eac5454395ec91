"""One decode for every waiting sequence: the step of continuous batching.

A sequence's thread submits its rows (:meth:`Batcher.submit`) and waits. When every
sequence taking part is waiting, the thread that owns the model (the one that loaded it:
the engine thread) runs the step — always that thread: ggml's CPU threads are an OpenMP
team of the thread that calls it, and a decode from another thread runs beside that team
spinning, 1.65x slower on this machine's two cores. The owner steps in
:meth:`Batcher.step_once` between its other work, and inline when it decodes itself
(tools using slot 0 while no slot is busy). The rows of all of
them go to llama.cpp in as few decodes as the context's batch and logit-row limits
allow: the MTP context's (one per head with chained heads, whose decodes select a head
for the whole batch) while any sequence is drafting, else the target's — so every target
decode carries every sequence's rows, however out of step they arrived. Each request then reads its own rows
of the output buffers in place. A later decode of the same context overwrites them: a
sequence that submitted to the other context since (its prompt's MTP entries, before it
reads the prompt's last logits) may still need them, so before a context decodes again
the rows of every sequence that is not decoding on it now are copied out (no sequence
reads anything during a step: all are waiting). When a step needs more than one decode
of a context, the rows of all but the last are copied too.

A decode llama.cpp refuses is retried one request at a time, so a failure lands on the
sequence that caused it, never on the others. Every other llama.cpp call on the shared
contexts (rolling back, snapshots) holds :attr:`Batcher.lock`, as a step does.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from engine.errors import DecodeError
from engine.runtime.decode.policy.costs import RoundCosts
from engine.runtime.llama.batch import Batch
from engine.runtime.llama.context import Context


@dataclass(eq=False)
class Request:
    """Rows one sequence decodes in the next step, and afterwards where its output is."""

    ctx: Context
    seq: int
    tokens: np.ndarray
    pos: np.ndarray
    logits: np.ndarray  # int8 flags, one per row
    hidden_in: np.ndarray | None = None  # MTP rows: the hidden row before each token
    head: int = 0  # chained heads: the NextN block this decode runs
    #: after the step: this request's logit rows and hidden rows (views or copies)
    out_logits: np.ndarray | None = None
    out_hidden: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False
    #: after the step: rows it decoded on this context, every sequence's (its cost's measure)
    step_rows: int = 0
    n_logits: int = field(init=False, default=0)

    @property
    def n(self) -> int:
        return len(self.tokens)

    def materialize(self) -> None:
        """Own copies of the output rows (the buffers they view are about to change)."""
        if self.out_logits is not None:
            self.out_logits = self.out_logits.copy()
        if self.out_hidden is not None:
            self.out_hidden = self.out_hidden.copy()

    def __post_init__(self) -> None:
        self.n_logits = int(self.logits.sum())  # logit rows it reads (read per step, more than once)


class Batcher:
    """Steps for the sequences of one loaded model (its target and MTP contexts)."""

    def __init__(self, target: Context, draft: Context | None):
        self.target = target
        self.draft = draft
        #: held for every llama.cpp call on the shared contexts
        self.lock = threading.RLock()
        self._cv = threading.Condition(threading.Lock())
        self._active = 0
        self._pending: list[Request] = []
        self._batches: dict[int, Batch] = {}
        #: the thread that runs every step
        self.owner = threading.get_ident()
        self._closed = False
        #: per context, the requests whose rows are views of its output buffers
        self._holders: dict[int, list[Request]] = {}
        #: target steps run, and when the last one ended (perf_counter seconds): the
        #: clock of the steps' depth policies (engine.runtime.slots.batchdepth)
        self.steps = 0
        self.step_t = 0.0
        #: verify times of the target decodes by total rows (what a sequence's draft rows
        #: cost a step: engine.runtime.slots.batchdepth.OwnDrafts)
        self.verify_costs = RoundCosts(1)
        #: (rows, milliseconds) of the recent target decodes (benchmarks and tests)
        self.target_decodes: deque[tuple[int, float]] = deque(maxlen=256)

    # ------------------------------------------------------------ taking part
    def join(self) -> None:
        """A sequence starts taking part: steps wait for its rows too."""
        with self._cv:
            self._active += 1

    def leave(self) -> None:
        """A sequence stops taking part (finished, failed or cancelled): a step that
        waited only for it runs now."""
        with self._cv:
            self._active -= 1
            assert self._active >= 0
            self._cv.notify_all()

    def close(self) -> None:
        """Refuse further decodes (the model is being unloaded); waiting ones fail."""
        with self._cv:
            self._closed = True
            for r in self._pending:
                r.error, r.done = DecodeError("the model was unloaded"), True
            self._pending.clear()
            self._cv.notify_all()

    @property
    def active(self) -> int:
        return self._active

    # ---------------------------------------------------------------- submit
    def submit(self, req: Request) -> Request:
        """Decode ``req`` in the next step (now, when every other sequence is waiting or
        none takes part). Raises what llama.cpp's decode of these rows raised."""
        owner = threading.get_ident() == self.owner
        with self._cv:
            if self._closed:
                raise DecodeError("the model was unloaded")
            self._pending.append(req)
            self._cv.notify_all()
            while not req.done:
                if owner and self._ready():
                    self._step()
                else:
                    self._cv.wait()
        if req.error is not None:
            raise req.error
        return req

    # ------------------------------------------------------------------ step
    def _ready(self) -> bool:
        return bool(self._pending) and len(self._pending) >= self._active

    def step_once(self, timeout: float) -> bool:
        """Owner thread: run a step once every taking part sequence is waiting, waiting
        up to ``timeout`` seconds for that; False when none ran."""
        assert threading.get_ident() == self.owner, "steps run on the thread that owns the model"
        with self._cv:
            if not self._ready():
                self._cv.wait(timeout)
                if not self._ready():
                    return False
            self._step()
            return True

    def _step(self) -> None:
        """Run the pending MTP decodes, or when there are none, the target decodes (the
        condition's lock is held). Target rows wait while any sequence is drafting: its
        verify rows come soon, and one target decode with everyone's rows costs about what
        one with a single sequence's does. So sequences that arrived at different moments
        fall into step: every target decode carries every sequence's rows."""
        drafting = [r for r in self._pending if r.ctx.is_mtp]
        if drafting:
            pending, self._pending = drafting, [r for r in self._pending if not r.ctx.is_mtp]
        else:
            pending, self._pending = self._pending, []
        try:
            with self.lock:
                groups: dict[tuple[int, int], list[Request]] = {}
                for r in pending:
                    groups.setdefault((id(r.ctx), r.head), []).append(r)
                for (_, head), reqs in groups.items():
                    self._run(reqs, head)
                if not drafting:
                    self.steps += 1
                    self.step_t = time.perf_counter()
        finally:
            for r in pending:
                r.done = True
            self._cv.notify_all()

    def _run(self, reqs: list[Request], head: int) -> None:
        ctx = reqs[0].ctx
        decoding = {r.seq for r in reqs}
        for old in self._holders.pop(id(ctx), []):
            if old.seq not in decoding:  # its sequence may still read them: keep a copy
                old.materialize()
        calls: list[list[Request]] = [[]]
        rows = outs = 0
        # by sequence: llama.cpp splits a batch whose sequences come out of order into a
        # micro-batch per sequence (4 sequences: 31 ms where one micro-batch takes 18)
        for r in sorted(reqs, key=lambda r: r.seq):  # as few decodes as the limits allow
            if calls[-1] and (rows + r.n > ctx.n_batch or outs + r.n_logits > ctx.n_outputs):
                calls.append([])
                rows = outs = 0
            calls[-1].append(r)
            rows += r.n
            outs += r.n_logits
        total = sum(r.n for r in reqs)
        for r in reqs:
            r.step_rows = total
        for i, call in enumerate(calls):
            self._decode(ctx, call, head, copy=i < len(calls) - 1)
        self._holders.setdefault(id(ctx), []).extend(r for r in calls[-1] if r.error is None)

    def _batch(self, ctx: Context) -> Batch:
        b = self._batches.get(id(ctx))
        if b is None:
            b = self._batches[id(ctx)] = Batch(ctx.n_batch, ctx.model.n_embd_out if ctx.is_mtp else 0)
        return b

    def _decode(self, ctx: Context, call: list[Request], head: int, *, copy: bool) -> None:
        b = self._batch(ctx)
        b.clear()
        for r in call:
            b.append(r.tokens, r.pos, r.logits, r.seq, r.hidden_in)
        if ctx.is_mtp and head:
            ctx.set_nextn_layer_offset(head)
        t0 = time.perf_counter()
        try:
            ctx.decode(b)
        except DecodeError as e:
            if len(call) == 1:
                call[0].error = e
                return
            for r in call:  # find the sequence whose rows llama.cpp refused
                self._decode(ctx, [r], head, copy=True)
            return
        finally:
            if ctx.is_mtp and head:
                ctx.set_nextn_layer_offset(0)
        if not ctx.is_mtp:
            ms = (time.perf_counter() - t0) * 1000
            self.target_decodes.append((b.n, ms))
            self.verify_costs.add_verify(b.n, ms)
        self._hand_out(ctx, call, copy)

    def _hand_out(self, ctx: Context, call: list[Request], copy: bool) -> None:
        """Each request's logit rows (output rows, in batch order) and hidden rows (a
        target's: by batch row; an MTP context's: by output row)."""
        logits = ctx.logit_rows_view() if any(r.n_logits for r in call) else None
        hidden = ctx.hidden_view() if ctx.nextn_embeddings else None
        row = out = 0
        for r in call:
            k = r.n_logits
            if logits is not None and k:
                r.out_logits = logits[out : out + k].copy() if copy else logits[out : out + k]
            if hidden is not None:
                h = hidden[out : out + k] if ctx.is_mtp else hidden[row : row + r.n]
                r.out_hidden = h.copy() if copy else h
            row += r.n
            out += k
