"""What the engine thread may start while other work runs, and how work runs off its path.

The engine thread takes jobs in order. Most wait until the slots are idle; these do not:

- :func:`beside_streams`: jobs that run while other generations stream — a read-only call
  (between steps), a load (built off the stepping path), an unload (which waits for its own
  model's streams only), embeddings or reranking (a pooling model has no streams);
- :func:`can_run_beside`: while a job holds some models (a load, an unload, a bench), the
  jobs that need none of them and cannot hold the thread — a generation into a free slot of
  another model, a read-only call, embeddings on another model;
- :func:`slotted`: a generation on a model with slots joins its steps.

:func:`run_off_path` runs work (a load) on a thread of its own while the engine thread keeps
stepping; :func:`run_in_steps` runs a call (the A/B bench) as one of its model's sequences.
Engine thread only: these read the engine's state, which only it touches.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from engine.errors import MtpStudioError
from engine.runtime import jobs as J
from engine.runtime.load.loader import LoadedModel


def beside_streams(job: J.Job) -> bool:
    return isinstance(job, (J.LoadModel, J.UnloadModel, J.Embed, J.Rerank)) or (
        isinstance(job, J.Call) and job.access == "read"
    )


def can_run_beside(job: J.Job, held: frozenset[str], state) -> bool:
    """Whether ``job`` may start while another job holds the models ``held``."""
    if isinstance(job, J.Call):
        return job.access == "read"
    if isinstance(job, (J.Embed, J.Rerank, J.Generate)):
        if job.model in held:  # the model being loaded (or benched): after it
            return False
        try:
            lm = state.get(job.model)
        except MtpStudioError:
            return True  # no such model: refused at once, in words
        if lm.name in held:
            return False
        if isinstance(job, J.Generate):  # only into a free slot
            return isinstance(lm, LoadedModel) and lm.slots is not None and lm.slots.busy < len(lm.slots)
        return isinstance(lm, LoadedModel)
    return False


def slotted(job: J.Job, state) -> LoadedModel | None:
    """The model whose slots run ``job``: a generation on a model loaded with several."""
    if not isinstance(job, J.Generate):
        return None
    try:
        lm = state.get(job.model)
    except MtpStudioError:
        return None  # failed in words by the ordinary path
    return lm if isinstance(lm, LoadedModel) and lm.slots is not None else None


def run_off_path(
    work: Callable[[Callable[[float, str], None]], Any],
    emit: Callable[[J.Event], None],
    step_while: Callable[..., None],
    name: str,
) -> Any:
    """``work(progress)`` on a thread of its own while ``step_while(waiting, idle=…)`` keeps
    the engine thread stepping; its progress is emitted from the engine thread; what it
    raises is raised here."""
    events: queue.SimpleQueue = queue.SimpleQueue()
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = work(lambda f, m: events.put(J.Progress(f, m)))
        except BaseException as e:  # re-raised on the engine thread
            out["error"] = e

    def flush() -> None:
        while not events.empty():
            emit(events.get())

    def working() -> bool:
        flush()
        return t.is_alive()

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    step_while(working, idle=t.join)
    flush()
    if "error" in out:
        raise out["error"]
    return out["value"]


def run_in_steps(
    fn: Callable[[], Any], start: Callable[[Callable[[], None]], None], step_while: Callable[..., None]
) -> Any:
    """``fn()`` as one of a model's sequences (``start``: its batcher's): its decodes go
    through the model's steps, which ``step_while(waiting)`` runs with every other model's
    until it returns; what it raises is raised here, outside the steps."""
    out: dict[str, Any] = {}

    def run() -> None:  # the engine thread, in the steps
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    start(run)
    step_while(lambda: not out)
    if "error" in out:
        raise out["error"]
    return out["value"]
