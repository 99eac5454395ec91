"""The engine thread: the one owner of every llama.cpp model and context.

The GUI and the HTTP server never touch llama.cpp; they :meth:`Engine.submit` jobs and
receive events. Jobs run one at a time in submission order (FIFO is the fairness rule:
a request never waits behind one submitted later). A bounded queue rejects work with
:class:`QueueFullError` instead of growing without limit.

Each job has a :class:`JobHandle`: an event stream (iterate it, or pass ``on_event`` to
be called on the engine thread — keep that callback quick) and :meth:`JobHandle.cancel`.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.errors import (
    Cancelled,
    EngineStoppedError,
    MtpStudioError,
    NoModelLoadedError,
    NativeCrashError,
    QueueFullError,
    RpcConnectionLostError,
)
from engine.runtime import jobs as J
from engine.runtime.decode.loop import generate
from engine.runtime.decode.prefixcache import PrefixCache
from engine.runtime.decode.policystore import save_policy
from engine.runtime.llama import owned
from engine.runtime.load.loader import LoadedModel, load
from engine.runtime.prompt.chat import PromptCache
from engine.settings import DEFAULT_PROMPT_CACHE_MB
from engine.runtime.request import prepare, resolve
from engine.runtime.worker import WorkerModel

log = logging.getLogger(__name__)

EventFn = Callable[[J.Event], None]


class JobHandle:
    """A submitted job. Thread-safe."""

    def __init__(self, job_id: int, job: J.Job, on_event: EventFn | None, observers: list | None = None):
        self.id = job_id
        self.job = job
        self.cancel_event = threading.Event()
        self.done = threading.Event()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._on_event = on_event
        self._observers = observers if observers is not None else []
        self._final: J.Done | J.Failed | None = None
        #: the submitter asked for per-round events (observers always get them)
        self._rounds = getattr(job, "rounds", True)

    def cancel(self) -> None:
        """Ask the job to stop at its next cancellation point. Not an error."""
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def _emit(self, event: J.Event) -> None:
        if isinstance(event, (J.Done, J.Failed)):
            self._final = event
        if isinstance(event, J.Round) and not self._rounds:
            pass
        elif self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                log.exception("event callback failed")
        else:
            self._events.put(event)
        for observe in self._observers:
            try:
                observe(self, event)
            except Exception:
                log.exception("event observer failed")
        if self._final is event:
            self.done.set()

    def events(self, timeout: float | None = None) -> Iterator[J.Event]:
        """Yield events until the final Done/Failed (inclusive). Only for handles
        submitted without ``on_event``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ev = self._events.get(timeout=remaining)
            except queue.Empty:
                raise TimeoutError(f"job {self.id} produced no event in time") from None
            yield ev
            if isinstance(ev, (J.Done, J.Failed)):
                return

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job; return its result, or raise its error. A cancelled job
        returns its partial result (``Done.cancelled`` is True)."""
        if self._on_event is None and not self.done.is_set():
            for _ in self.events(timeout):
                pass
        elif not self.done.wait(timeout):
            raise TimeoutError(f"job {self.id} did not finish in time")
        final = self._final
        if isinstance(final, J.Failed):
            raise final.error
        assert final is not None
        return final.result


@dataclass
class EngineState:
    """What the engine thread owns. Only the engine thread touches it."""

    #: in-process models, and models on remote devices that run in a worker process
    models: dict[str, LoadedModel | WorkerModel] = field(default_factory=dict)
    caches: dict[str, PromptCache] = field(default_factory=dict)

    def get(self, name: str | None) -> LoadedModel | WorkerModel:
        if not self.models:
            raise NoModelLoadedError("No model is loaded. Load a model first.")
        if name is None:
            return next(iter(self.models.values()))
        lm = self.models.get(name)
        if lm is None:
            known = ", ".join(self.models)
            raise NoModelLoadedError(f"Model {name!r} is not loaded (loaded: {known}).")
        return lm


@dataclass(frozen=True)
class EngineDefaults:
    #: what a request gets for the values it leaves out (the app's or the CLI's
    #: defaults, under the submitter's own: engine.runtime.request)
    request: J.Defaults = J.Defaults()
    max_queue: int = 64
    #: run models with remote (RPC) devices in a worker process (engine.runtime.worker);
    #: off only inside that worker
    isolate_rpc: bool = True
    #: host memory for prompt-cache snapshots of each loaded model (0: off)
    prompt_cache_mb: int = DEFAULT_PROMPT_CACHE_MB


class Engine:
    """Owns the engine thread. Create, :meth:`start`, submit jobs, :meth:`stop`."""

    def __init__(self, defaults: EngineDefaults | None = None):
        self.defaults = defaults or EngineDefaults()
        self._queue: queue.Queue = queue.Queue(maxsize=self.defaults.max_queue)
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._state = EngineState()
        self._stopping = False
        self._current: JobHandle | None = None
        self._lock = threading.Lock()
        #: thread-safe snapshot of the loaded models' info, for other threads
        self._models_info: dict[str, dict] = {}
        #: each loaded model's prompt cache (its info() is safe from any thread)
        self._prefix_caches: dict[str, PrefixCache] = {}
        self._prompt_cache_bytes = self.defaults.prompt_cache_mb << 20
        self._handlers: dict[type, Callable[[Any, JobHandle], Any]] = {
            J.LoadModel: self._load,
            J.UnloadModel: self._unload,
            J.Generate: self._generate,
            J.Call: self._call,
        }
        self.counters = {"jobs": 0, "generated_tokens": 0, "drafted": 0, "accepted": 0, "prompt_tokens": 0}
        self._observers: list[Callable[[JobHandle, J.Event], None]] = []

    def observe(self, fn: Callable[[JobHandle, J.Event], None]) -> None:
        """Also call ``fn(handle, event)`` for every event of every job submitted from
        now on, on the engine thread (keep it quick). The GUI sees server traffic this way."""
        self._observers.append(fn)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Engine:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mtp-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel the running job, drop queued ones, unload everything, join."""
        with self._lock:
            self._stopping = True
            current = self._current
        if current is not None:
            current.cancel()
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
                raise QueueFullError(f"The engine queue is full ({self.defaults.max_queue} jobs waiting).") from None
        return handle

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize() + (1 if self._current is not None else 0)

    def models(self) -> dict[str, dict]:
        """Loaded models (name -> info), safe to call from any thread."""
        with self._lock:
            return dict(self._models_info)

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        while True:
            handle = self._queue.get()
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
        for lm in self._state.models.values():
            lm.close()
        self._state.models.clear()
        owned.reap()
        with self._lock:
            self._models_info.clear()

    def _execute(self, handle: JobHandle) -> None:
        self.counters["jobs"] += 1
        if handle.cancelled:
            handle._emit(J.Done(None, cancelled=True))
            return
        refused: MtpStudioError | None = None
        if isinstance(handle.job, J.Generate):
            # resolved before anyone sees it: observers (the GUI) and a worker process get
            # the job exactly as it runs
            try:
                handle.job = resolve(handle.job, self.defaults.request)
            except MtpStudioError as e:
                refused = e
        handle._emit(J.Started(handle.id))
        if refused is not None:
            handle._emit(J.Failed(refused, refused.code, str(refused)))
            return
        try:
            result = self._handlers[type(handle.job)](handle.job, handle)
        except Cancelled:
            handle._emit(J.Done(None, cancelled=True))
        except MtpStudioError as e:
            handle._emit(J.Failed(e, e.code, str(e)))
        except Exception as e:  # never let a job kill the engine thread
            log.exception("job %s failed", handle.id)
            handle._emit(J.Failed(e, "internal_error", f"Internal error: {e}"))
        else:
            handle._emit(J.Done(result, cancelled=handle.cancelled))

    def _publish_models(self) -> None:
        caches = {name: lm.session.cache for name, lm in self._state.models.items()
                  if isinstance(lm, LoadedModel) and lm.session.cache is not None}  # fmt: skip
        with self._lock:
            self._models_info = {name: dict(lm.info) for name, lm in self._state.models.items()}
            self._prefix_caches = caches

    # ----------------------------------------------------------- prompt cache
    def prompt_cache_info(self) -> dict:
        """The prompt caches' figures summed over the loaded models (any thread)."""
        with self._lock:
            caches = list(self._prefix_caches.values())
            budget = self._prompt_cache_bytes
        total = {"entries": 0, "bytes": 0, "hits": 0, "live": 0, "misses": 0, "saved": 0, "evicted": 0, "skipped": 0,
                 "restored_tokens": 0}  # fmt: skip
        for c in caches:
            for k, v in c.info().items():
                if k in total:
                    total[k] += v
        return {**total, "budget_bytes": budget}

    def set_prompt_cache_mb(self, mb: int) -> None:
        """A new prompt-cache budget for every loaded model and later loads (0: off),
        applied on the engine thread before its next generation (entries over it are
        evicted then)."""
        self.set_prompt_cache_bytes(max(0, int(mb)) << 20)

    def set_prompt_cache_bytes(self, nbytes: int) -> None:
        """:meth:`set_prompt_cache_mb` to the byte."""
        with self._lock:
            self._prompt_cache_bytes = max(0, int(nbytes))

    def _prompt_cache(self, lm: LoadedModel) -> None:
        """Give ``lm``'s session its prompt cache, at the budget set now."""
        with self._lock:
            budget = self._prompt_cache_bytes
        if lm.session.cache is None:
            lm.session.cache = PrefixCache(budget)
        elif lm.session.cache.budget != budget:
            lm.session.cache.set_budget(budget)

    # ---------------------------------------------------------------- handlers
    def _load(self, job: J.LoadModel, h: JobHandle) -> dict:
        if job.replace:
            self._unload(J.UnloadModel(None), h)
        progress = lambda f, m: h._emit(J.Progress(f, m))  # noqa: E731
        lm: LoadedModel | WorkerModel
        if job.spec.rpc and self.defaults.isolate_rpc:
            with self._lock:
                mb = self._prompt_cache_bytes >> 20
            lm = WorkerModel.start(job.spec, progress=progress, cancel=h.cancel_event, prompt_cache_mb=mb)
        else:
            lm = load(job.spec, progress=progress, cancel=h.cancel_event)
        old = self._state.models.pop(lm.name, None)
        if old is not None:
            old.close()
        self._state.models[lm.name] = lm
        self._state.caches[lm.name] = PromptCache()
        if isinstance(lm, LoadedModel):
            self._prompt_cache(lm)
        self._publish_models()
        return dict(lm.info, name=lm.name)

    def _unload(self, job: J.UnloadModel, h: JobHandle) -> list[str]:
        names = list(self._state.models) if job.name is None else [job.name]
        for name in names:
            lm = self._state.models.pop(name, None)
            if lm is None:
                raise NoModelLoadedError(f"Model {name!r} is not loaded.")
            lm.close()
            self._state.caches.pop(name, None)
        self._publish_models()
        return names

    def _call(self, job: J.Call, h: JobHandle) -> Any:
        target = next(iter(self._state.models.values()), None)
        if isinstance(target, WorkerModel):  # the model lives in the worker: so does the call
            return self._in_worker(target, job, h)
        return job.fn(self._state, h.cancel_event, h._emit)

    def _in_worker(self, wm: WorkerModel, job: J.Generate | J.Call, h: JobHandle) -> Any:
        try:
            return wm.run(job, h)
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
        if isinstance(lm, WorkerModel):
            result = self._in_worker(lm, job, h)
            self._count(result, result.prompt_tokens)
            return result
        cache = self._state.caches.setdefault(lm.name, PromptCache())
        self._prompt_cache(lm)
        prep = prepare(job, lm, cache)
        lm.session.phase_hook = job.phase_hook
        parser = prep.reply.parser() if prep.reply is not None else None

        def emit(toks: list[int], text: str, lps) -> None:
            parts = tuple(parser.feed(text)) if parser is not None else None
            h._emit(J.Tokens(tuple(toks), text, None if lps is None else tuple(lps), parts))

        try:
            g = generate(lm.session, prep.prompt, prep.params, cancel=h.cancel_event, on_emit=emit,
                         on_round=lambda r: h._emit(J.Round(r)))  # fmt: skip
            if parser is not None:
                rest = parser.finish()
                if rest:
                    h._emit(J.Tokens((), "", None, tuple(rest)))
        finally:
            lm.session.phase_hook = None
            if prep.learns:
                save_policy(lm.auto_policy_path, lm.auto_policy)
        if prep.prompt_text is not None:
            reply_bytes = b"".join(lm.model.piece(t) for t in g.tokens)
            cache.remember(prep.prompt_text, prep.prompt, reply_bytes.decode("utf-8", "replace"), g.tokens)
        result = J.GenerateResult(g.tokens, g.text, g.stats, lm.name, len(prep.prompt), g.logprobs,
                                  parser.reply if parser is not None else None)  # fmt: skip
        self._count(result, len(prep.prompt))
        return result

    def _count(self, r: J.GenerateResult, prompt_tokens: int) -> None:
        self.counters["generated_tokens"] += len(r.tokens)
        self.counters["drafted"] += r.stats.drafted
        self.counters["accepted"] += r.stats.accepted
        self.counters["prompt_tokens"] += prompt_tokens
