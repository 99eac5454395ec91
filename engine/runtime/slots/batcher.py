"""One decode for every waiting sequence: the step of continuous batching, on one thread.

Every sequence's decode loop runs on the thread that owns the model (the one that loaded
it: the engine thread), each in a greenlet of its own: the ordinary loop
(:mod:`engine.runtime.decode.loop`), unchanged. Its one suspension point is a decode: a
sequence hands its rows over (:meth:`Batcher.submit`) and switches back to the scheduler
(:meth:`Batcher.step_once`), which resumes every sequence until each is waiting for a
decode or has ended, then runs the step, then resumes the sequences whose rows it decoded.
No thread hands over to another, no lock is waited for and nothing is woken that has
nothing to do: a step costs its decodes, the sequences' own Python, and one greenlet
switch per sequence and decode. A sequence alone runs its own steps, with no switch, and
gives the thread back to the scheduler every :data:`YIELD_S` (so arrivals start and the
engine takes its next job), and at once when the engine has a job waiting
(:attr:`Batcher.attention`): the switches cost a single stream 6-8% of its tokens/s on the
demo. ggml's CPU threads are an OpenMP team of the thread that
calls it, and every decode runs on the owner (from another thread the same decode ran
1.65x slower on this machine's two cores).

A sequence arrives from any thread (:meth:`Batcher.start`: the request's thread prepared
its prompt) and starts at the next step; it takes part from then until its loop returns.
The rows of every waiting sequence go to llama.cpp in as few decodes as the context's
batch and logit-row limits allow: the MTP context's (one per head with chained heads,
whose decodes select a head for the whole batch) while any sequence is drafting, else the
target's — so every target decode carries every sequence's rows, however out of step they
arrived. Each sequence then reads its own rows of the output buffers in place. A later
decode of the same context overwrites them: a sequence that submitted to the other
context since (its prompt's MTP entries, before it reads the prompt's last logits) may
still need them, so before a context decodes again the rows of every sequence that is not
decoding on it now are copied out. When a step needs more than one decode of a context,
the rows of all but the last are copied too.

A decode llama.cpp refuses is retried one request at a time, so a failure lands on the
sequence that caused it, never on the others.

Ownership: everything here, and every sequence's session and its slot of the shared
contexts, belongs to the owner thread; only :meth:`start` and :attr:`active` are for other
threads (under ``_cv``). :attr:`lock` is kept for llama.cpp calls on the shared contexts
made outside a sequence (tools and tests on the owner thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from greenlet import getcurrent, greenlet

from engine.errors import DecodeError
from engine.runtime.decode.policy.costs import RoundCosts
from engine.runtime.llama.batch import Batch
from engine.runtime.llama.context import Context

log = logging.getLogger(__name__)

#: the longest a sequence alone runs its own steps before it gives the thread back to the
#: scheduler (which then starts arrivals and lets the engine take its next job)
YIELD_S = 0.005
#: the longest a new sequence's first rows (its prompt) wait for a request being prepared
#: beside it, so that both prompts go in one decode: two clients at once on the demo had
#: the second's prompt decoded after the first's (its first token ~3 ms later); a prompt
#: takes ~0.5 ms to prepare
GATHER_S = 0.002


@dataclass(eq=False)
class StepRows:
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
    n_logits: int = -1
    #: the sequence's own batch holding these rows, of its sequence: decoded as it is when
    #: the sequence runs its step alone (no copy into the step's batch)
    batch: Batch | None = None
    #: embedding rows of a media chunk (``batch`` holds them): a decode of their own
    media: bool = False

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
        if self.n_logits < 0:  # logit rows it reads (read per step, more than once), when not given
            self.n_logits = int(self.logits.sum())


def _nothing_waits() -> bool:
    return False


class Batcher:
    """Steps for the sequences of one loaded model (its target and MTP contexts)."""

    def __init__(self, target: Context, draft: Context | None):
        self.target = target
        self.draft = draft
        #: held for llama.cpp calls on the shared contexts made outside a step
        self.lock = threading.RLock()
        #: guards what other threads hand over: arrivals, and the count of sequences
        self._cv = threading.Condition(threading.Lock())
        self._arrivals: list[Callable[[], None]] = []
        #: owner thread only: sequences taking part, those to resume, rows waiting for a step
        self._sequences: set[greenlet] = set()
        self._runnable: deque[greenlet] = deque()
        self._pending: list[StepRows] = []
        self._waiters: dict[int, greenlet] = {}  # id(request) -> the sequence waiting for it
        self._batches: dict[int, Batch] = {}
        #: the thread that runs every step and every sequence
        self.owner = threading.get_ident()
        self._closed = False
        #: per context, the requests whose rows are views of its output buffers
        self._holders: dict[int, list[StepRows]] = {}
        #: target steps run, and when the last one ended (perf_counter seconds): the
        #: clock of the steps' depth policies (engine.runtime.decode.policy.steps)
        self.steps = 0
        self.step_t = 0.0
        #: verify times of the target decodes by total rows (what a sequence's draft rows
        #: cost a step: engine.runtime.decode.policy.steps.OwnDrafts)
        self.verify_costs = RoundCosts(1)
        #: (rows, milliseconds) of the recent target decodes (benchmarks and tests)
        self.target_decodes: deque[tuple[int, float]] = deque(maxlen=256)
        #: seconds spent inside llama.cpp's decodes, target and MTP (benchmarks/decoding/step_share.py)
        self.decode_seconds = 0.0
        #: when a sequence last gave the thread back to the scheduler (perf_counter seconds),
        #: and how long a sequence alone may run its own steps (0: always through the scheduler)
        self._yielded = 0.0
        self.yield_s = YIELD_S
        #: whether the owner has other work waiting (the engine's queue): a sequence alone
        #: then gives the thread back at its next decode instead of within YIELD_S (owner thread)
        self.attention: Callable[[], bool] = _nothing_waits
        #: whether a sequence is being prepared to take part (a slot promised to a request
        #: rendering its prompt: engine.runtime.slots.pool); set by the pool
        self.arriving: Callable[[], bool] = _nothing_waits
        #: sequences that have not had a step yet, and since when a step holding the first
        #: rows of one has waited for others to join it (GATHER_S)
        self._fresh: set[greenlet] = set()
        self._gather_since: float | None = None

    # ------------------------------------------------------------ taking part
    def adopt(self, attention: Callable[[], bool] | None = None) -> None:
        """The calling thread runs the steps from now on (a model loaded on another thread
        and handed to the engine thread); before any sequence takes part. ``attention``:
        whether that thread has other work waiting (:attr:`attention`)."""
        assert not self._sequences and not self._pending
        self.owner = threading.get_ident()
        if attention is not None:
            self.attention = attention

    def start(self, run: Callable[[], None]) -> None:
        """Any thread: run ``run()`` — one sequence's decode loop — on the owner thread,
        taking part in the steps from the next one until it returns. ``run`` reports its
        own outcome (what it raises is logged and dropped)."""
        with self._cv:
            if self._closed:
                raise DecodeError("the model was unloaded")
            self._arrivals.append(run)
            self._cv.notify_all()

    @property
    def active(self) -> int:
        """Sequences taking part, those about to start included (any thread: two reads of
        a length, each atomic; asked on every decode, so it takes no lock)."""
        return len(self._sequences) + len(self._arrivals)

    def close(self) -> None:
        """Refuse further decodes (the model is being unloaded): sequences still waiting
        fail their decode and end (owner thread)."""
        with self._cv:
            self._closed = True
            arrivals, self._arrivals = self._arrivals, []
        for r in self._pending:
            r.error, r.done = DecodeError("the model was unloaded"), True
            self._wake(r)
        self._pending.clear()
        for run in arrivals:  # each reports its own failure
            self._begin(run)
        self._resume()

    # ---------------------------------------------------------------- submit
    def submit(self, req: StepRows) -> StepRows:
        """Decode ``req`` in the next step. From a sequence: it waits (the scheduler runs
        the others and the step meanwhile); from the owner thread outside any sequence (a
        tool on a slot while none is busy): the steps run here until its rows are decoded.
        Raises what llama.cpp's decode of these rows raised."""
        if self._closed:
            raise DecodeError("the model was unloaded")
        me = getcurrent()
        self._pending.append(req)
        if me in self._sequences:
            if self._alone(req) and not (me in self._fresh and (self.arriving() or self.attention())):
                self._step_alone(req)  # a sequence alone: its step here, with no switch
            else:
                self._waiters[id(req)] = me
                me.parent.switch()  # back to the scheduler, until the step has decoded these rows
                self._yielded = time.perf_counter()
            self._fresh.discard(me)
        else:
            assert threading.get_ident() == self.owner, "decodes run on the thread that owns the model"
            while not req.done:
                self.step_once(0.0)
        if req.error is not None:
            raise req.error
        return req

    def _alone(self, req: StepRows) -> bool:
        """Whether a sequence's decode may run its step at once, in the sequence: it is the
        only sequence, nothing else waits for a step or to start, the owner has no other
        work waiting (a request in the engine's queue is taken at once, not after up to
        :data:`YIELD_S`: its first token came 5 ms late behind a stream), and it gave the
        thread back (to the scheduler, so the engine's other work and arrivals are seen)
        within :data:`YIELD_S`. A step of one costs the same either way; the switches to
        the scheduler and back cost 12% of the demo's tokens/s at one sequence."""
        return (
            len(self._sequences) == 1
            and self._pending == [req]
            and not self._runnable
            and not self._arrivals
            and time.perf_counter() - self._yielded < self.yield_s
            and not self.attention()
        )

    # ------------------------------------------------------------------ step
    def step_once(self, timeout: float) -> bool:
        """Owner thread, outside any sequence: start the sequences that arrived, resume
        every sequence until each waits for a decode or ends, and run one step of the
        waiting rows; with nothing to do, wait up to ``timeout`` seconds for a sequence to
        arrive. False when no step ran."""
        assert threading.get_ident() == self.owner, "steps run on the thread that owns the model"
        assert getcurrent() not in self._sequences, "a sequence cannot run the steps"
        with self._cv:
            if not self._arrivals and not self._runnable and not self._pending and timeout > 0:
                self._cv.wait(timeout)
            arrivals, self._arrivals = self._arrivals, []
        for run in arrivals:
            self._begin(run)
        self._resume()
        if not self._pending or self._gathering():
            return False
        self._gather_since = None
        self._step()
        self._resume()  # the sequences whose rows came back go on to their next decode
        return True

    def _gathering(self) -> bool:
        """Whether to hold this step a moment for a request about to join it: the step
        holds a new sequence's first rows (its prompt) and another request is queued with
        the owner (which takes it when this returns) or being prepared (waited for here),
        for at most :data:`GATHER_S` in all; both prompts then go in one decode."""
        if not self._fresh or not any(self._waiters.get(id(r)) in self._fresh for r in self._pending):
            return False
        now = time.perf_counter()
        if self._gather_since is None:
            self._gather_since = now
        left = GATHER_S - (now - self._gather_since)
        if left <= 0:
            return False
        if self.attention():
            return True
        if not self.arriving():
            return False
        with self._cv:
            if not self._arrivals:
                self._cv.wait(left)
        return True  # the next step_once starts what arrived (or steps, its time being up)

    def _begin(self, run: Callable[[], None]) -> None:
        def body() -> None:
            try:
                run()
            except BaseException:  # a sequence reports its own outcome: this is a bug
                log.exception("a sequence's loop raised")
            finally:
                self._fresh.discard(g)
                with self._cv:
                    self._sequences.discard(g)

        g = greenlet(body)
        with self._cv:
            self._sequences.add(g)
        self._fresh.add(g)
        self._runnable.append(g)

    def _resume(self) -> None:
        """Run every runnable sequence until it waits for a decode or ends."""
        while self._runnable:
            g = self._runnable.popleft()
            g.parent = getcurrent()
            g.switch()

    def _wake(self, r: StepRows) -> None:
        g = self._waiters.pop(id(r), None)
        if g is not None:
            self._runnable.append(g)

    def _step(self) -> None:
        """Run the pending MTP decodes, or when there are none, the target decodes. Target
        rows wait while any sequence is drafting: its verify rows come soon, and one target
        decode with everyone's rows costs about what one with a single sequence's does. So
        sequences that arrived at different moments fall into step: every target decode
        carries every sequence's rows."""
        drafting = [r for r in self._pending if r.ctx.is_mtp]
        if drafting:
            pending, self._pending = drafting, [r for r in self._pending if not r.ctx.is_mtp]
        else:
            pending, self._pending = self._pending, []
        try:
            with self.lock:
                groups: dict[tuple[int, int], list[StepRows]] = {}
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
                self._wake(r)

    def _step_alone(self, req: StepRows) -> None:
        """:meth:`_step` for the one request of a sequence alone (:meth:`_alone`): the same
        decode and rows, without the grouping a step of several needs."""
        self._pending.clear()
        self._gather_since = None
        ctx = req.ctx
        for old in self._holders.pop(id(ctx), ()):
            if old.seq != req.seq:  # a sequence that left: nobody reads it, but keep it whole
                old.materialize()
        req.step_rows = req.n
        try:
            with self.lock:
                self._decode(ctx, [req], req.head, copy=False)
                if not ctx.is_mtp:
                    self.steps += 1
                    self.step_t = time.perf_counter()
        finally:
            req.done = True
        if req.error is None:
            self._holders[id(ctx)] = [req]

    def _run(self, reqs: list[StepRows], head: int) -> None:
        ctx = reqs[0].ctx
        decoding = {r.seq for r in reqs}
        for old in self._holders.pop(id(ctx), []):
            if old.seq not in decoding:  # its sequence may still read them: keep a copy
                old.materialize()
        calls: list[list[StepRows]] = [[]]
        rows = outs = 0
        # by sequence: llama.cpp splits a batch whose sequences come out of order into a
        # micro-batch per sequence (4 sequences: 31 ms where one micro-batch takes 18)
        for r in sorted(reqs, key=lambda r: r.seq):  # as few decodes as the limits allow
            if r.media:  # embedding rows cannot share a batch with token rows
                calls[-1:] = [c for c in (calls[-1], [r]) if c] + [[]]
                rows = outs = 0
                continue
            if calls[-1] and (rows + r.n > ctx.n_batch or outs + r.n_logits > ctx.n_outputs):
                calls.append([])
                rows = outs = 0
            calls[-1].append(r)
            rows += r.n
            outs += r.n_logits
        if not calls[-1]:
            calls.pop()
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

    def _decode(self, ctx: Context, call: list[StepRows], head: int, *, copy: bool) -> None:
        if len(call) == 1 and call[0].batch is not None:
            b = call[0].batch  # one sequence's rows: its own batch, as it is
        else:
            b = self._batch(ctx)
            b.clear()
            for r in call:
                b.append(r.tokens, r.pos, r.logits, r.seq, r.hidden_in, r.n_logits)
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
            self.decode_seconds += time.perf_counter() - t0
        if not ctx.is_mtp and not getattr(b, "embd_rows", False):  # media rows are no verify's cost
            ms = (time.perf_counter() - t0) * 1000
            self.target_decodes.append((b.n, ms))
            self.verify_costs.add_verify(b.n, ms)
        self._hand_out(ctx, call, copy)

    def _hand_out(self, ctx: Context, call: list[StepRows], copy: bool) -> None:
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
