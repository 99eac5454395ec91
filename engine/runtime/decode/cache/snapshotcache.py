"""The prompt cache: snapshots of prompt prefixes in host memory, shared by every
conversation on one loaded model.

A session's contexts hold one conversation at a time. When the next prompt does not
continue it — another chat, another client, or the same chat re-rendered differently
(Qwen3.5/3.6 templates drop earlier turns' thinking) — llama.cpp can cut an attention KV
cache back to the common prefix, but not a hybrid model's recurrent state: without
snapshots every such prompt is decoded from its first token.

:class:`SnapshotCache` keeps :class:`~engine.runtime.decode.cache.snapshot.Snapshot`\\ s of
prompt prefixes, least recently used first out, within a byte budget. It only stores
and plans; the prefill (:mod:`engine.runtime.decode.prefill`) carries the plan out. Before
a prefill (:meth:`SnapshotCache.plan`) the session starts from whichever is longer: what the live
contexts already share with the prompt, or the snapshot sharing the most with it — on a
model that can be cut back, any snapshot (cut to the common prefix after restoring); on a
hybrid or recurrent model, or one with sliding-window attention (a snapshot of it holds
only the window's cells), only one lying wholly inside the prompt. When that is about
to throw away a live state with a real tail, the live state is saved first, so the
conversation it belonged to resumes where it was.

On models whose restored state cannot be cut back snapshots are also taken during prefill, at the marks
(:meth:`SnapshotCache.marks`): the points the request gives (a chat prompt's message
boundaries: after the system prompt, at the start of the reply; the token before the
end of a prompt that is not a chat) and every :attr:`~SnapshotCache.interval` tokens
through long prompts.

Entries are keyed by their tokens and belong to one session: a cache is made for each
loaded model with its contexts' settings and dropped with it, so a snapshot from another
model, build or setting cannot be restored. A snapshot that cannot be taken for lack of
memory is skipped; one that llama.cpp refuses to restore is dropped and the prompt is
decoded from scratch.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, fields

from collections.abc import Callable

import numpy as np

from engine.runtime.decode.entries import common_prefix
from engine.runtime.decode.cache.snapshot import Snapshot, token_key
from engine.settings import DEFAULT_PROMPT_CACHE_MB

log = logging.getLogger(__name__)

#: snapshots through long prompts on hybrid/recurrent models, every this many tokens
DEFAULT_INTERVAL = 2048
#: a live state is saved before it is thrown away only when this many tokens would be lost
MIN_TAIL = 16


@dataclass(frozen=True)
class CacheFigures:
    """A prompt cache's figures (or several caches' summed, ``+``), for the Server page,
    /metrics and the prompt-cache benchmark."""

    entries: int = 0  # snapshots held
    bytes: int = 0  # host memory they take
    #: the budget each model's cache gets (not summed: every cache has the same)
    budget_bytes: int = 0
    hits: int = 0  # prompts resumed from a snapshot
    live: int = 0  # prompts resumed from what the contexts held
    misses: int = 0  # prompts decoded from their first token
    saved: int = 0
    evicted: int = 0
    skipped: int = 0  # snapshots not taken: over the budget, or no memory for them
    restored_tokens: int = 0

    def __add__(self, other: CacheFigures) -> CacheFigures:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        return CacheFigures(**dict(summed, budget_bytes=max(self.budget_bytes, other.budget_bytes)))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class CacheStats:
    hits: int = 0  # prompts resumed from a snapshot
    live: int = 0  # prompts resumed from what the contexts held
    misses: int = 0  # prompts decoded from their first token
    saved: int = 0
    evicted: int = 0
    skipped: int = 0  # snapshots not taken: over the budget, or no memory for them
    restored_tokens: int = 0


@dataclass(frozen=True)
class Resume:
    """What a prefill starts from (:meth:`SnapshotCache.plan`)."""

    #: the snapshot to restore (None: go on from the live contexts)
    snap: Snapshot | None
    #: tokens of the snapshot that are used
    n: int
    #: tokens the live contexts share with the prompt and can keep
    live_n: int
    #: the live state would be lost with a real tail: save it first
    save_live: bool


class SnapshotCache:
    """Snapshots of one session's prompt prefixes (the prompt cache). Engine thread only;
    :meth:`info` is safe from any thread."""

    def __init__(self, budget_bytes: int = DEFAULT_PROMPT_CACHE_MB << 20, *, interval: int = DEFAULT_INTERVAL):
        self.budget = max(0, int(budget_bytes))
        self.interval = max(1, int(interval))
        self._entries: OrderedDict[bytes, Snapshot] = OrderedDict()  # least recently used first
        self._bytes = 0
        self.stats = CacheStats()
        #: guards the entries and figures: sequences decoding together (engine.runtime.slots)
        #: share one cache, and the Server page reads its figures
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- entries
    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def entries(self) -> list[Snapshot]:
        with self._lock:
            return list(self._entries.values())

    def add(self, snap: Snapshot) -> bool:
        """Keep ``snap``, evicting the least recently used entries to fit the budget.
        False (nothing kept) when it alone is larger than the budget."""
        size = snap.nbytes
        with self._lock:
            old = self._entries.pop(snap.key, None)
            if old is not None:
                self._bytes -= old.nbytes
            if size > self.budget:
                self.stats.skipped += 1
                return False
            self._evict_to(self.budget - size)
            self._entries[snap.key] = snap
            self._bytes += size
            self.stats.saved += 1
        return True

    def drop(self, snap: Snapshot) -> None:
        with self._lock:
            if self._entries.pop(snap.key, None) is not None:
                self._bytes -= snap.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def set_budget(self, budget_bytes: int) -> None:
        """A new budget; entries over it are evicted now."""
        with self._lock:
            self.budget = max(0, int(budget_bytes))
            self._evict_to(self.budget)

    def _evict_to(self, limit: int) -> None:
        """Drop least recently used entries until they take at most ``limit`` bytes
        (the lock held)."""
        while self._entries and self._bytes > limit:
            _, gone = self._entries.popitem(last=False)
            self._bytes -= gone.nbytes
            self.stats.evicted += 1

    def find(self, tokens: list[int] | np.ndarray) -> Snapshot | None:
        """The entry holding exactly ``tokens`` (marked as just used)."""
        key = token_key(np.asarray(tokens, np.int32))
        with self._lock:
            snap = self._entries.get(key)
            if snap is not None:
                self._entries.move_to_end(key)
        return snap

    def best(self, prompt: np.ndarray, limit: int, *, cut: bool) -> tuple[Snapshot | None, int]:
        """The entry to resume ``prompt`` from and how many of its tokens are used (at
        most ``limit``). With ``cut`` (the model's memory can be cut back) an entry counts
        for its common prefix with the prompt; without, only an entry wholly inside it."""
        best, best_n = None, 0
        for snap in self.entries():  # oldest first: a later one wins a tie
            n = min(snap.n, len(prompt))
            diff = np.flatnonzero(snap.tokens[:n] != prompt[:n])
            shared = int(diff[0]) if diff.size else n
            if cut:
                usable = min(shared, limit)
            else:
                usable = snap.n if shared == snap.n and snap.n <= limit else 0
            if usable > 0 and usable >= best_n:
                best, best_n = snap, usable
        return best, best_n

    # ------------------------------------------------------------------- plan
    def plan(self, live: list[int], prompt: list[int], limit: int, *, cut: bool) -> Resume:
        """Where a prefill of ``prompt`` starts (at most ``limit`` tokens reused), given
        the tokens the live contexts hold: from a snapshot when it shares more with the
        prompt than they do. ``cut``: the model's memory can be cut back (attention
        only); without, only a live state or snapshot wholly inside the prompt counts."""
        shared = min(common_prefix(live, prompt), limit)
        live_n = shared if (cut or shared == len(live)) else 0
        snap, snap_n = self.best(np.asarray(prompt, np.int32), limit, cut=cut)
        restoring = snap is not None and snap_n > live_n
        lost = len(live) - (0 if restoring else live_n)
        return Resume(
            snap if restoring else None, snap_n if restoring else 0, live_n, lost >= MIN_TAIL and self.enabled
        )

    def note_live(self, live_n: int) -> None:
        """A prefill went on from the live contexts (``live_n`` tokens kept; 0: a miss)."""
        with self._lock:
            if live_n > 0:
                self.stats.live += 1
            else:
                self.stats.misses += 1

    def note_restored(self, snap: Snapshot, n: int) -> None:
        """A prefill resumed from ``snap`` (``n`` of its tokens used)."""
        with self._lock:
            if snap.key in self._entries:
                self._entries.move_to_end(snap.key)
            self.stats.hits += 1
            self.stats.restored_tokens += n

    def note_refused(self, snap: Snapshot) -> None:
        """llama.cpp refused to restore ``snap``: it is dropped, the prompt decoded anew."""
        self.drop(snap)
        with self._lock:
            self.stats.misses += 1

    def snapshots_in_prefill(self, cut: bool) -> bool:
        """Whether prefills snapshot at marks: only where a restored state cannot be cut
        back (not ``cut``: recurrent state, sliding-window attention; on other models any
        snapshot serves every shorter prefix)."""
        return self.enabled and not cut

    def marks(self, cut: bool, start: int, n: int, points: tuple[int, ...]) -> list[int]:
        """Positions in ``(start, n)`` to snapshot at while prefilling a prompt of ``n``
        tokens from ``start``: the request's ``points`` and every :attr:`interval`
        tokens, where :meth:`snapshots_in_prefill`."""
        if not self.snapshots_in_prefill(cut):
            return []
        out = set(points)
        out.update(range(self.interval, n, self.interval))
        return sorted(p for p in out if start < p < n)

    def save(self, tokens: list[int], take: Callable[[], Snapshot]) -> None:
        """Keep ``take()``, the snapshot of a session holding ``tokens``, unless an entry
        holds the same tokens (that one is marked as just used) or there is no memory
        for it."""
        if not tokens or self.find(tokens) is not None:
            return
        try:
            snap = take()
        except MemoryError:
            log.warning("prompt cache: no memory for a snapshot; skipped")
            with self._lock:
                self.stats.skipped += 1
            return
        self.add(snap)

    # ------------------------------------------------------------------ report
    def info(self) -> CacheFigures:
        """Figures for the Server page and /metrics."""
        with self._lock:
            return CacheFigures(len(self._entries), self._bytes, self.budget, **asdict(self.stats))
