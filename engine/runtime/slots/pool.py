"""The slots of one loaded model: which are free, and what each is doing.

:class:`SlotPool` admits each generation first come first served: the engine thread takes
jobs in order and waits while every slot is busy or promised (:meth:`SlotPool.reserve`), so
a request never overtakes one submitted before it. Which slot it gets is decided on the
thread that prepares its prompt, once the prompt is known (:meth:`Reservation.bind`): the free slot whose
conversation shares the longest prefix with the prompt, whose cache the prefill then
reuses (an agent's next turn, a subagent's, each in the slot it left), else the one idle
longest, so that the most recent conversations stay. Until then the others' steps do not
wait for it: rendering and tokenizing an agent's long request takes a step's time or more.
A slot is given back when its generation ends, however it ends. The live figures
(:meth:`SlotPool.info`) are what the Server page and ``/metrics`` show.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from engine.runtime.decode.entries import common_prefix
from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.session import Session
from engine.runtime.decode.stats import RoundStats
from engine.runtime.slots.batcher import Batcher
from engine.runtime.decode.policy.steps import SteppedDepth, StepDepth


#: most seconds the owner thread waits for a step before it looks at its other work
STEP_WAIT = 0.005

#: a free slot's conversation is a prompt's own when they share more than this fraction of
#: the prompt (llama-server's ``--slot-prompt-similarity``): the prompt goes to the slot
#: sharing most; a smaller share (a BOS token, a short system prompt) is not worth another
#: conversation's cache, and the prompt goes to the slot idle longest
SIMILARITY = 0.5


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
    #: when its last generation ended (perf_counter seconds; 0: never used)
    released: float = 0.0

    def record(self, r: RoundStats) -> None:
        """A round of the slot's generation (for the Server page and /metrics)."""
        self.tokens += r.emitted
        self.tokens_total += r.emitted
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.depth = r.depth

    def info(self, now: float) -> SlotInfo:
        elapsed = now - self.started if self.busy else 0.0
        return SlotInfo(
            self.index,
            self.busy,
            self.job_id,
            self.tokens if self.busy else 0,
            self.tokens / elapsed if self.busy and elapsed > 0 else 0.0,
            self.depth if self.busy else 0,
            self.accepted / self.drafted if self.drafted else None,
            self.requests,
            self.tokens_total,
        )


@dataclass(frozen=True)
class SlotInfo:
    """One slot as the Server and Performance pages and ``/metrics`` show it, at one moment."""

    slot: int
    busy: bool
    #: the job it decodes (None: idle)
    job: int | None
    #: the request's tokens so far, and their rate (0 while idle)
    tokens: int
    tokens_per_second: float
    #: its draft depth in its last round (0 while idle)
    depth: int
    #: accepted / drafted over its current or last request (None: nothing drafted)
    acceptance: float | None
    #: over the slot's life
    requests: int
    tokens_total: int

    @property
    def state(self) -> str:
        return "busy" if self.busy else "idle"


class SlotPool:
    def __init__(self, batcher: Batcher, sessions: list[Session]):
        self.batcher = batcher
        self.slots = [Slot(i, s) for i, s in enumerate(sessions)]
        self._cv = threading.Condition()
        #: generations admitted whose slot is not chosen yet
        self._promised = 0
        #: generations admitted and not ended: promised or bound to a slot. One count, read
        #: without the lock by the engine thread (:attr:`busy`): binding a promise to a slot
        #: leaves it as it is. Read as a sum of the promises and the slots' flags, a bind
        #: between the two reads showed a pool with a generation starting as idle, and the
        #: engine thread went to wait for its next job instead of stepping the one arriving.
        self._taken = 0
        batcher.arriving = lambda: self._promised > 0  # a prompt being prepared: a new sequence soon
        #: the depth of steps of each batch size, with MTP auto (engine.runtime.decode.policy.steps)
        self.steppers: dict[int, StepDepth] = {}

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def busy(self) -> int:
        """Slots taken: generating, or promised to a generation that is preparing (any
        thread, no lock: one read of one count)."""
        return self._taken

    def reserve(self, job_id: int, cancel: threading.Event | None = None) -> Reservation | None:
        """Admit job ``job_id``: a slot is promised to it, stepping the busy ones while
        every slot is taken (owner thread; None: the job was cancelled while it waited)."""
        while True:
            with self._cv:
                if self._taken < len(self.slots):
                    self._promised += 1
                    self._taken += 1
                    return Reservation(self, job_id)
            if cancel is not None and cancel.is_set():
                return None
            self.batcher.step_once(STEP_WAIT)

    def acquire(
        self, job_id: int, cancel: threading.Event | None = None, prompt: list[int] | None = None
    ) -> Slot | None:
        """:meth:`reserve` and :meth:`Reservation.bind` at once, for a caller that knows
        its prompt (tools, tests); give it back with :meth:`release`."""
        r = self.reserve(job_id, cancel)
        return r.bind(prompt or []) if r is not None else None

    def _bind(self, job_id: int, prompt: list[int]) -> Slot:
        with self._cv:
            assert self._promised > 0
            free = [s for s in self.slots if not s.busy]
            shared = {s.index: common_prefix(s.session.target_tokens, prompt) for s in free}
            own = [s for s in free if shared[s.index] > SIMILARITY * len(prompt)]
            if own:
                slot = max(own, key=lambda s: (shared[s.index], -s.released))
            else:
                slot = min(free, key=lambda s: s.released)
            self._promised -= 1
            slot.busy, slot.job_id, slot.started = True, job_id, time.perf_counter()
            slot.tokens = slot.drafted = slot.accepted = slot.depth = 0
            slot.requests += 1
            return slot

    def _unpromise(self) -> None:
        with self._cv:
            assert self._promised > 0
            self._promised -= 1
            self._taken -= 1
            self._cv.notify_all()

    def release(self, slot: Slot) -> None:
        """The slot's generation ended (finished, failed or cancelled)."""
        with self._cv:
            if slot.busy:  # given back once
                self._taken -= 1
            slot.busy, slot.job_id, slot.released = False, None, time.perf_counter()
            self._cv.notify_all()

    def depth_policy(self, slot: Slot, policy: DepthPolicy) -> DepthPolicy:
        """``slot``'s policy for a generation asking for ``policy``: a fixed depth stays
        what was asked for; auto is the model's own policy while the slot decodes alone
        and the step's, chosen for its batch size, while others decode with it."""
        if not policy.learns:
            return policy
        return SteppedDepth(policy, self.batcher, self.steppers)

    def close(self) -> None:
        self.batcher.close()

    def info(self) -> list[SlotInfo]:
        now = time.perf_counter()
        return [s.info(now) for s in self.slots]

    def step_depths(self) -> dict[int, int]:
        """MTP auto's depth of the last step of each number of sequences decoding together."""
        return {n: s.last_depth for n, s in sorted(dict(self.steppers).items())}


class Reservation:
    """A slot promised to one admitted generation (:meth:`SlotPool.reserve`); bound to a
    slot once the prompt is known, given back on leaving the ``with`` block, bound or not."""

    def __init__(self, pool: SlotPool, job_id: int):
        self.pool = pool
        self.job_id = job_id
        self.slot: Slot | None = None
        self._open = True

    def bind(self, prompt: list[int]) -> Slot:
        """The free slot for ``prompt``: the one whose conversation shares the longest
        prefix with it (over :data:`SIMILARITY` of it), else the one idle longest."""
        assert self._open and self.slot is None
        self.slot = self.pool._bind(self.job_id, prompt)
        return self.slot

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        if self.slot is not None:
            self.pool.release(self.slot)
        else:
            self.pool._unpromise()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
