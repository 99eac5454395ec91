"""The engine thread: the one owner of every llama.cpp model and context.

The GUI and the HTTP server never touch llama.cpp; they :meth:`Engine.submit` jobs and receive
events. Jobs are taken in submission order (FIFO is the fairness rule: a request never waits behind
one submitted later). A chat model decodes up to ``LoadSpec.parallel`` generations together (one
slot or several: one path either way): the engine thread admits each to a free slot (waiting for one
when all are busy), a thread of the request's own prepares its prompt, and its decode loop then runs
here, on the engine thread, one of the sequences its batcher steps together
(:mod:`engine.runtime.slots`). A read-only :class:`~engine.runtime.jobs.Call` (``access="read"``:
counting a prompt's tokens) and embeddings or rerank scores on a pooling model
(:mod:`engine.runtime.pooled`: such a model has no streams) run between the slots' steps. A load is
built on a thread of its own while this thread keeps the running streams stepping, and the model is
handed over when ready; an unload waits for its own model's streams only, and so does a call that
names the one model it needs (the A/B bench). While one of these holds its model, the jobs at the
queue's head that need another model (a generation into a free slot, embeddings) or only read start
meanwhile. Any other job (a plain ``Call``) waits until the slots are idle. A bounded queue rejects
work with :class:`QueueFullError` instead of growing without limit.

Each job has a :class:`~engine.runtime.handle.JobHandle`: an event stream (iterate it, or
pass ``on_event`` to be called on the engine thread — keep that callback quick) and
``cancel()``. A generation is decided once (:meth:`Engine.resolve`, which a submitter may
call before it queues the job, as the endpoint does) and run by
:mod:`engine.runtime.generatejob`; what the engine owns is in
:mod:`engine.runtime.modelstate`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import queue
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from engine.errors import (
    Cancelled,
    EngineStoppedError,
    InvalidRequestError,
    MtpStudioError,
    NoModelLoadedError,
    NativeCrashError,
    QueueFullError,
    RpcConnectionLostError,
)
from engine.runtime import jobs as J
from engine.runtime.config import EngineConfig
from engine.runtime.admission import beside_streams, can_run_beside, run_in_steps, run_off_path, slotted
from engine.runtime.generatejob import decode_prepared, prepare_in_slot
from engine.runtime.handle import EventFn, JobHandle
from engine.runtime.llama import lib, owned
from engine.runtime.load.loader import LoadedModel, load
from engine.runtime.decode.cache.snapshotcache import CacheFigures
from engine.runtime.modelinfo import CHAT, ModelInfo
from engine.runtime.modelstate import EngineState, Published, Totals
from engine.runtime.pooledjob import refusal, run_pooled
from engine.runtime.decider import BUILTIN, resolve
from engine.runtime.slots.pool import STEP_WAIT, SlotInfo
from engine.runtime.worker import WorkerModel

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineConfig", "EngineState", "JobHandle", "EventFn"]

#: no job taken ahead (Engine._peeked; None is stop()'s end marker)
_NOTHING = object()


class Engine:
    """Owns the engine thread. Create, :meth:`start`, submit jobs, :meth:`stop`."""

    def __init__(self, config: EngineConfig | None = None):
        self.config = config or EngineConfig()
        self._queue: queue.Queue = queue.Queue(maxsize=self.config.max_queue)
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._state = EngineState()
        self._stopping = False
        self._current: JobHandle | None = None
        #: generations admitted to slots (prepared on threads of their own, decoded on this one)
        self._in_slots: set[JobHandle] = set()
        #: a job taken from the queue while another ran, to run next (engine thread only)
        self._peeked: JobHandle | None | object = _NOTHING
        self._lock = threading.Lock()
        #: the loaded models and prompt-cache figures as other threads see them
        self._published = Published(self.config.prompt_cache_mb << 20)
        self._handlers: dict[type, Callable[[Any, JobHandle], Any]] = {
            J.LoadModel: self._load,
            J.UnloadModel: self._unload,
            J.Generate: self._generate,
            J.Call: self._call,
            J.Embed: self._pooled,
            J.Rerank: self._pooled,
        }
        self._observers: list[Callable[[JobHandle, J.Event], None]] = []

    def observe(self, fn: Callable[[JobHandle, J.Event], None]) -> None:
        """Also call ``fn(handle, event)`` for every event of every job submitted from now on,
        on the engine thread (keep it quick). The GUI sees server traffic this way."""
        self._observers.append(fn)

    def unobserve(self, fn: Callable[[JobHandle, J.Event], None]) -> None:
        """Stop calling ``fn`` (added by :meth:`observe`), for the jobs running now too."""
        with self._lock:
            if fn in self._observers:
                self._observers.remove(fn)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Engine:
        if self._thread is None:
            lib.prefer_decoding_thread()  # the GIL back soon after each decode (lib.SWITCH_INTERVAL_S)
            self._thread = threading.Thread(target=self._run, name="mtp-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel the running job, drop queued ones, unload everything, join."""
        with self._lock:
            self._stopping = True
            running = [self._current, *self._in_slots]
        for h in running:
            if h is not None:
                h.cancel()
        while True:
            try:
                h = self._queue.get_nowait()
            except queue.Empty:
                break
            if h is not None:
                h._emit(J.Done(None, cancelled=True))
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ submit
    def submit(self, job: J.Job, *, on_event: EventFn | None = None) -> JobHandle:
        if type(job) not in self._handlers:
            raise TypeError(f"unknown job type {type(job).__name__}")
        with self._lock:
            if self._stopping or self._thread is None:
                raise EngineStoppedError("The engine is not running.")
            handle = JobHandle(next(self._ids), job, on_event, self._observers)
            try:
                self._queue.put_nowait(handle)
            except queue.Full:
                raise QueueFullError(f"The engine queue is full ({self.config.max_queue} jobs waiting).") from None
        return handle

    @property
    def queue_depth(self) -> int:
        """Jobs waiting or running (those in slots included)."""
        with self._lock:
            running = len(self._in_slots) + (
                1 if self._current is not None and self._current not in self._in_slots else 0
            )
        return self._queue.qsize() + running + isinstance(self._peeked, JobHandle)

    def totals(self) -> Totals:
        """Jobs run and tokens processed since the engine started, any thread."""
        return self._published.totals()

    def slots(self) -> dict[str, list[SlotInfo]]:
        """Each loaded model's slots now (:meth:`Published.slots`), safe to call from any thread."""
        return self._published.slots()

    def step_depths(self) -> dict[str, dict[int, int]]:
        """Each loaded model's auto depth by step size (:meth:`Published.step_depths`), any thread."""
        return self._published.step_depths()

    def models(self) -> dict[str, ModelInfo]:
        """Loaded models (name -> what each load made of it), safe to call from any thread."""
        return self._published.models()

    def request_defaults(self) -> J.Defaults:
        """What a request that sets nothing gets: this engine's layer over the built-in one. Any thread."""
        return self.config.request.over(BUILTIN)

    def resolve(self, job: J.Generate) -> J.Generate:
        """``job`` with every value decided: its own, then its ``defaults`` (the
        submitter's), then this engine's, then the built-in ones
        (:func:`engine.runtime.decider.resolve`), checked. Any thread; a job submitted
        resolved is not resolved again. Raises :class:`~engine.errors.InvalidRequestError`."""
        return resolve(job, self.config.request)

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        while True:
            handle = self._take()
            if handle is None:
                break
            with self._lock:
                self._current = handle
            try:
                self._execute(handle)
            finally:
                with self._lock:
                    self._current = None
                owned.reap()  # llama.cpp objects collected unclosed on other threads
        self._drain()
        for lm in self._state.models.values():
            lm.close()
        self._state.models.clear()
        owned.reap()
        self._published.clear()

    def _execute(self, handle: JobHandle) -> None:
        self._published.count_job()
        if handle.cancelled:
            handle._emit(J.Done(None, cancelled=True))
            return
        refused: MtpStudioError | None = None
        if isinstance(handle.job, J.Generate):
            # resolved before anyone sees it: observers (the GUI) and a worker process get
            # the job exactly as it runs
            try:
                handle.job = self.resolve(handle.job)
            except MtpStudioError as e:
                refused = e
        pool_model = slotted(handle.job, self._state) if refused is None else None
        if isinstance(handle.job, J.Call) and handle.job.access == "exclusive" and handle.job.model is not None:
            own = self._state.models.get(handle.job.model)
            self._drain([own] if own is not None else [])  # its model to itself; the others go on
        elif pool_model is None and not beside_streams(handle.job):
            self._drain()  # it has the models to itself
        handle._emit(J.Started(handle.id))
        if refused is not None:
            handle._emit(J.Failed(refused, refused.code, str(refused)))
            return
        if pool_model is not None:
            self._start_in_slot(handle, pool_model)
            return
        self._finish(handle, lambda: self._handlers[type(handle.job)](handle.job, handle))

    def _finish(self, handle: JobHandle, run: Callable[[], Any]) -> None:
        """Run a job's body and end its event stream: Done (cancelled too) or Failed."""
        try:
            result = run()
        except Exception as e:
            self._fail(handle, e)
        else:
            handle._emit(J.Done(result, cancelled=handle.cancelled))

    @staticmethod
    def _fail(handle: JobHandle, e: Exception) -> None:
        """End ``handle``'s event stream for a body that raised ``e``: a cancel is not an
        error; a typed error is told as it is; anything else is an internal error (logged)."""
        if isinstance(e, Cancelled):
            handle._emit(J.Done(None, cancelled=True))
        elif isinstance(e, MtpStudioError):
            handle._emit(J.Failed(e, e.code, str(e)))
        else:  # never let a job kill the engine thread
            log.exception("job %s failed", handle.id, exc_info=e)
            handle._emit(J.Failed(e, "internal_error", f"Internal error: {e}"))

    # ------------------------------------------------------------------ slots
    def _busy_pools(self, models: list | None = None) -> list:
        """The slot pools with work: a slot taken, or a sequence in their steps (a call's)."""
        models = list(self._state.models.values()) if models is None else models
        return [
            lm.slots
            for lm in models
            if isinstance(lm, LoadedModel) and lm.slots is not None and (lm.slots.busy or lm.slots.batcher.active)
        ]

    def _step_while(
        self, waiting: Callable[[], bool], idle: Callable[[float], Any] = time.sleep, held: frozenset[str] | None = None
    ) -> None:
        """Run every busy model's steps while ``waiting()``: their streams go on meanwhile;
        with none busy, ``idle(seconds)`` instead. With ``held`` (the models the waiting job
        has to itself), the jobs at the queue's head that need none of them start meanwhile
        (:meth:`_admit_beside`)."""
        while waiting():
            if held is not None:
                self._admit_beside(held)
            pools = self._busy_pools()
            if not pools:
                idle(STEP_WAIT)
                continue
            for pool in pools:
                pool.batcher.step_once(STEP_WAIT / len(pools))

    def _admit_beside(self, held: frozenset[str]) -> None:
        """Start the jobs at the queue's head that can run beside a job holding the models
        ``held`` (a load, a bench): a generation joining the free slot of another model, a
        read-only call, embeddings on another model. The first job that cannot is kept for
        :meth:`_take`, and nothing behind it starts: the queue's order holds."""
        while not self._stopping:
            if self._peeked is _NOTHING:
                try:
                    self._peeked = self._queue.get_nowait()  # may be stop()'s None: kept for _take
                except queue.Empty:
                    return
            h = self._peeked
            if not isinstance(h, JobHandle) or not can_run_beside(h.job, held, self._state) and not h.cancelled:
                return
            self._peeked = _NOTHING
            self._execute(h)

    def _off_path(self, work: Callable[[Callable[[float, str], None]], Any], h: JobHandle, held: frozenset[str]) -> Any:
        """``work(progress)`` — a load — on a thread of its own while this thread keeps the
        running streams stepping and starts the queued jobs that do not need ``held`` (the
        model being loaded)."""
        step = functools.partial(self._step_while, held=held)
        return run_off_path(work, h._emit, step, f"mtp-load-{h.id}")

    def _take(self) -> JobHandle | None:
        """The next job; while slots are busy this thread runs their steps meanwhile
        (decodes run on the thread that owns the model: engine.runtime.slots.batcher)."""
        if self._peeked is not _NOTHING:  # taken from the queue while another job ran (_admit_beside)
            h, self._peeked = self._peeked, _NOTHING
            if isinstance(h, JobHandle) and self._stopping:
                h._emit(J.Done(None, cancelled=True))
                return None
            return h  # type: ignore[return-value]  (a JobHandle, or stop()'s None)
        while True:
            pools = self._busy_pools()
            if not pools:
                return self._queue.get()
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                pass
            for pool in pools:
                pool.batcher.step_once(STEP_WAIT / len(pools))

    def _start_in_slot(self, handle: JobHandle, lm: LoadedModel) -> None:
        """Admit ``handle`` to ``lm``'s slots (waiting while all are taken: FIFO). A thread of
        its own prepares its prompt and takes the slot that suits it
        (engine.runtime.slots.pool); its decode loop then runs on this thread, in the steps
        of the model's batcher, from the next step until it ends."""
        assert lm.slots is not None
        pool = lm.slots
        reservation = pool.reserve(handle.id, handle.cancel_event)
        if reservation is None:
            handle._emit(J.Done(None, cancelled=True))
            return
        self._published.give_cache(lm)
        with self._lock:
            self._in_slots.add(handle)
        texts = self._state.texts_of(lm.name)

        def leave() -> None:
            reservation.close()
            with self._lock:
                self._in_slots.discard(handle)

        def prepare_and_join() -> None:  # the request's thread: render, tokenize, choose the slot
            try:
                prep, slot = prepare_in_slot(handle.job, lm, texts, reservation)

                def decode() -> None:  # the engine thread, in the steps
                    try:
                        self._finish(handle, lambda: self._decode_in_slot(handle, lm, prep, texts, slot))
                    finally:
                        leave()

                pool.batcher.start(decode)
            except Exception as e:
                self._fail(handle, e)
                leave()

        threading.Thread(target=prepare_and_join, name=f"mtp-prepare-{handle.id}", daemon=True).start()

    def _decode_in_slot(self, handle: JobHandle, lm: LoadedModel, prep, texts, slot) -> J.GenerateResult:
        result = decode_prepared(handle.job, prep, lm, texts, handle, slot)
        self._count(result, result.prompt_tokens)
        return result

    def _drain(self, models: list | None = None) -> None:
        """Until no slot of ``models`` (None: every model) is busy; every busy model's
        streams go on meanwhile, and with ``models`` given the queued jobs that need none of
        them start (:meth:`_admit_beside`)."""
        held = frozenset(lm.name for lm in models) if models is not None else None
        self._step_while(lambda: bool(self._busy_pools(models)), held=held)

    def _publish_models(self) -> None:
        self._published.publish(self._state)

    # ----------------------------------------------------------- prompt cache
    def prompt_cache_info(self) -> CacheFigures:
        """The prompt caches' figures summed over the loaded models, workers' too (any thread)."""
        return self._published.prompt_cache_info()

    def set_prompt_cache_mb(self, mb: int) -> None:
        """A new prompt-cache budget for every loaded model and later loads (0: off),
        applied on the engine thread before its next generation (entries over it are
        evicted then), in a worker process too."""
        self.set_prompt_cache_bytes(max(0, int(mb)) << 20)

    def set_prompt_cache_bytes(self, nbytes: int) -> None:
        """:meth:`set_prompt_cache_mb` to the byte."""
        self._published.set_prompt_cache_bytes(nbytes)

    # ---------------------------------------------------------------- handlers
    def _load(self, job: J.LoadModel, h: JobHandle) -> ModelInfo:
        """Load beside the running streams (off the stepping path), then hand the model
        over. With ``replace`` every model ends its streams and is unloaded first, to free
        its memory; a loaded model of the same name ends its streams once the new one is
        ready, and is closed then."""
        if job.replace:
            self._unload(J.UnloadModel(None), h)
        prompt_cache_bytes = self._published.prompt_cache_bytes

        def work(progress: Callable[[float, str], None]) -> LoadedModel | WorkerModel:
            if job.spec.rpc and self.config.isolate_rpc:
                return WorkerModel.start(
                    job.spec, progress=progress, cancel=h.cancel_event, prompt_cache_bytes=prompt_cache_bytes
                )
            return load(job.spec, progress=progress, cancel=h.cancel_event)

        held = frozenset({job.spec.name or Path(job.spec.path).name.removesuffix(".gguf")})
        lm: LoadedModel | WorkerModel = self._off_path(work, h, held)
        if isinstance(lm, LoadedModel) and lm.slots is not None:  # this thread runs its steps, seeing its queue
            lm.slots.batcher.adopt(lambda: self._peeked is not _NOTHING or not self._queue.empty())
        old = self._state.models.get(lm.name)
        if old is not None:
            self._drain([old])
            del self._state.models[lm.name]
            old.close()
        self._state.models[lm.name] = lm
        self._state.texts.pop(lm.name, None)
        if isinstance(lm, LoadedModel):
            self._published.give_cache(lm)
        self._publish_models()
        return lm.info

    def _unload(self, job: J.UnloadModel, h: JobHandle) -> list[str]:
        """Unload after the model's own streams end (other models' go on)."""
        names = list(self._state.models) if job.name is None else [job.name]
        for name in names:
            lm = self._state.models.get(name)
            if lm is None:
                raise NoModelLoadedError(f"Model {name!r} is not loaded.")
            self._drain([lm])
            del self._state.models[name]
            lm.close()
            self._state.texts.pop(name, None)
        self._publish_models()
        return names

    def _call(self, job: J.Call, h: JobHandle) -> Any:
        target = (
            self._state.models.get(job.model)
            if job.model is not None
            else next(iter(self._state.models.values()), None)
        )
        if job.model is not None and target is None:
            raise NoModelLoadedError(f"Model {job.model!r} is not loaded.")
        if isinstance(target, WorkerModel):  # the model lives in the worker: so does the call
            return self._in_worker(target, job, h)
        if (
            job.access == "exclusive"
            and job.model is not None
            and isinstance(target, LoadedModel)
            and target.slots is not None
        ):
            # as one of its sequences: its decodes go through the model's steps, the other models' go on
            step = functools.partial(self._step_while, held=frozenset({target.name}))
            return run_in_steps(lambda: job.fn(self._state, h.cancel_event, h._emit), target.slots.batcher.start, step)
        return job.fn(self._state, h.cancel_event, h._emit)

    def _pooled(self, job: J.Embed | J.Rerank, h: JobHandle) -> J.PooledResult:
        return run_pooled(job, self._state.get(job.model), h.cancel_event)

    def _in_worker(self, wm: WorkerModel, job: J.Generate | J.Call, h: JobHandle) -> Any:
        try:
            return wm.run(job, h, prompt_cache_bytes=self._published.prompt_cache_bytes)
        except (RpcConnectionLostError, NativeCrashError):
            # the worker is gone: forget the model so the app shows it unloaded and can load it again
            if wm.alive:
                raise
            if self._state.models.get(wm.name) is wm:
                del self._state.models[wm.name]
                self._publish_models()
            wm.close()
            raise

    def _generate(self, job: J.Generate, h: JobHandle) -> J.GenerateResult:
        lm = self._state.get(job.model)
        if (kind := lm.info.kind) != CHAT:
            raise InvalidRequestError(refusal(lm.name, kind, "chat"))
        # a chat model in this process decodes in its slots' steps (_start_in_slot): here only
        # one in a worker process
        assert isinstance(lm, WorkerModel), "a chat model loaded here has slots"
        result = self._in_worker(lm, job, h)
        self._count(result, result.prompt_tokens)
        return result

    def _count(self, r: J.GenerateResult, prompt_tokens: int) -> None:
        self._published.count(len(r.tokens), r.stats.drafted, r.stats.accepted, prompt_tokens)
