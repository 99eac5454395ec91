"""The slots of one loaded model: which are free, and what each is doing.

:class:`SlotPool` hands a free slot (its :class:`~engine.runtime.decode.session.Session`)
to each generation, first come first served: the engine thread takes jobs in order and
waits for a slot when all are busy, so a request never overtakes one submitted before it.
A slot is given back when its generation ends, however it ends. The live figures
(:meth:`SlotPool.info`) are what the Server page and ``/metrics`` show.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.session import Session
from engine.runtime.decode.stats import RoundStats
from engine.runtime.slots.batcher import Batcher
from engine.runtime.slots.batchdepth import BatchDepth, StepDepth


#: most seconds the owner thread waits for a step before it looks at its other work
STEP_WAIT = 0.005


@dataclass
class Slot:
    index: int
    session: Session
    busy: bool = False
    job_id: int | None = None
    started: float = 0.0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    depth: int = 0
    #: over the slot's life
    requests: int = 0
    tokens_total: int = 0

    def record(self, r: RoundStats) -> None:
        """A round of the slot's generation (for the Server page and /metrics)."""
        self.tokens += r.emitted
        self.tokens_total += r.emitted
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.depth = r.depth

    def info(self, now: float) -> dict:
        elapsed = now - self.started if self.busy else 0.0
        return {
            "slot": self.index,
            "state": "busy" if self.busy else "idle",
            "job": self.job_id,
            "tokens": self.tokens if self.busy else 0,
            "tokens_per_second": self.tokens / elapsed if self.busy and elapsed > 0 else 0.0,
            "depth": self.depth if self.busy else 0,
            "acceptance": self.accepted / self.drafted if self.drafted else None,
            "requests": self.requests,
            "tokens_total": self.tokens_total,
        }


class SlotPool:
    def __init__(self, batcher: Batcher, sessions: list[Session]):
        self.batcher = batcher
        self.slots = [Slot(i, s) for i, s in enumerate(sessions)]
        self._cv = threading.Condition()
        #: the depth of steps of each batch size, with MTP auto (engine.runtime.slots.batchdepth)
        self.steppers: dict[int, StepDepth] = {}

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def busy(self) -> int:
        return sum(s.busy for s in self.slots)

    def acquire(self, job_id: int, cancel: threading.Event | None = None) -> Slot | None:
        """A free slot for job ``job_id``, stepping the busy ones while all are busy
        (owner thread; None: the job was cancelled while it waited). Which slot does not
        matter: the prompt cache restores into any."""
        while True:
            with self._cv:
                free = next((s for s in self.slots if not s.busy), None)
                if free is not None:
                    free.busy, free.job_id, free.started = True, job_id, time.perf_counter()
                    free.tokens = free.drafted = free.accepted = free.depth = 0
                    free.requests += 1
                    self.batcher.join()  # before the slot's thread starts: steps wait for it
                    return free
            if cancel is not None and cancel.is_set():
                return None
            self.batcher.step_once(STEP_WAIT)

    def release(self, slot: Slot) -> None:
        """The slot's generation ended (finished, failed or cancelled)."""
        self.batcher.leave()
        with self._cv:
            slot.busy, slot.job_id = False, None
            self._cv.notify_all()

    def depth_policy(self, slot: Slot, policy: DepthPolicy) -> DepthPolicy:
        """``slot``'s policy for a generation asking for ``policy``: a fixed depth stays
        what was asked for; auto is the model's own policy while the slot decodes alone
        and the step's, chosen for its batch size, while others decode with it."""
        if not policy.learns:
            return policy
        return BatchDepth(policy, self.batcher, self.steppers)

    def wait_idle(self) -> None:
        """Step until no slot is busy (owner thread; before a job that needs the model
        to itself)."""
        while self.busy:
            self.batcher.step_once(STEP_WAIT)

    def close(self) -> None:
        self.batcher.close()

    def info(self) -> list[dict]:
        now = time.perf_counter()
        return [s.info(now) for s in self.slots]

    def step_depths(self) -> dict[int, int]:
        """MTP auto's depth of the last step of each number of sequences decoding together."""
        return {n: s.last_depth for n, s in sorted(dict(self.steppers).items())}
