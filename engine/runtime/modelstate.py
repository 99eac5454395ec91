"""What the engine thread owns about its loaded models, and the figures other threads
read of them.

:class:`EngineState` is the engine thread's own: the loaded models (in this process, or
in a worker process for models on remote devices) and each one's tokenized texts.
:class:`Published` is the thread-safe face of it — each model's info, the prompt-cache
budget every model gets, and the prompt caches' figures summed over the models, those in
worker processes included.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from engine.errors import NoModelLoadedError
from engine.runtime.decode.cache.snapshotcache import CacheFigures
from engine.runtime.load.loader import LoadedModel
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.slots.pool import SlotInfo, SlotPool
from engine.runtime.worker import WorkerModel


@dataclass
class EngineState:
    """What the engine thread owns. Only the engine thread touches it."""

    #: in-process models, and models on remote devices that run in a worker process
    models: dict[str, LoadedModel | WorkerModel] = field(default_factory=dict)
    #: per model, the text and tokens of its recent conversations
    texts: dict[str, TokenizedTexts] = field(default_factory=dict)

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

    def texts_of(self, name: str) -> TokenizedTexts:
        return self.texts.setdefault(name, TokenizedTexts())


@dataclass
class Totals:
    """What an engine has done since it started, for /metrics."""

    jobs: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    drafted: int = 0
    accepted: int = 0


class Published:
    """The loaded models as other threads see them, the prompt-cache budget and the
    engine's totals. Any thread; the engine thread publishes after every change."""

    def __init__(self, prompt_cache_bytes: int):
        self._lock = threading.Lock()
        self._info: dict[str, ModelInfo] = {}
        self._models: list[LoadedModel | WorkerModel] = []
        self._pools: dict[str, SlotPool] = {}  # the models' slot pools (each thread-safe itself)
        self._budget = max(0, int(prompt_cache_bytes))
        self._totals = Totals()

    def publish(self, state: EngineState) -> None:
        with self._lock:
            self._info = {name: lm.info for name, lm in state.models.items()}
            self._models = list(state.models.values())
            self._pools = {
                name: lm.slots
                for name, lm in state.models.items()
                if isinstance(lm, LoadedModel) and lm.slots is not None
            }

    def count_job(self) -> None:
        with self._lock:
            self._totals.jobs += 1

    def count(self, generated: int, drafted: int, accepted: int, prompt_tokens: int) -> None:
        """A generation's tokens into the totals (the engine thread, or a worker's result)."""
        with self._lock:
            t = self._totals
            t.generated_tokens += generated
            t.drafted += drafted
            t.accepted += accepted
            t.prompt_tokens += prompt_tokens

    def totals(self) -> Totals:
        with self._lock:
            return replace(self._totals)

    def clear(self) -> None:
        with self._lock:
            self._info.clear()
            self._models = []
            self._pools = {}

    def models(self) -> dict[str, ModelInfo]:
        with self._lock:
            return dict(self._info)

    def _pool_items(self) -> list[tuple[str, SlotPool]]:
        with self._lock:
            return list(self._pools.items())

    def slots(self) -> dict[str, list[SlotInfo]]:
        """Each published model's slots now (model name -> one per slot); a pooling model
        (embeddings, rerank) has none. Read without a lock: the engine thread writes each
        figure whole, so a slot's figures may be a round apart, never torn."""
        return {name: pool.info() for name, pool in self._pool_items()}

    def step_depths(self) -> dict[str, dict[int, int]]:
        """Each published model's MTP auto depth of its last step of n sequences (model name
        -> n -> depth: engine.runtime.decode.policy.steps)."""
        return {name: pool.step_depths() for name, pool in self._pool_items()}

    # ----------------------------------------------------------- prompt cache
    @property
    def prompt_cache_bytes(self) -> int:
        with self._lock:
            return self._budget

    def set_prompt_cache_bytes(self, nbytes: int) -> None:
        with self._lock:
            self._budget = max(0, int(nbytes))

    def give_cache(self, lm: LoadedModel) -> None:
        """Give ``lm`` its prompt cache at the budget set now (engine thread)."""
        lm.use_prompt_cache(self.prompt_cache_bytes)

    def prompt_cache_info(self) -> CacheFigures:
        """The prompt caches' figures summed over the loaded models, those in worker
        processes included (as of their last job), with the budget each model gets."""
        with self._lock:
            models = list(self._models)
            budget = self._budget
        total = CacheFigures()
        for lm in models:
            if isinstance(lm, WorkerModel):
                total += lm.prompt_cache_info()
            elif lm.snapshots is not None:
                total += lm.snapshots.info()
        return replace(total, budget_bytes=budget)
