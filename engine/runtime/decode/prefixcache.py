"""The prompt cache: snapshots of prompt prefixes in host memory, shared by every
conversation on one loaded model.

A session's contexts hold one conversation at a time. When the next prompt does not
continue it — another chat, another client, or the same chat re-rendered differently
(Qwen3.5/3.6 templates drop earlier turns' thinking) — llama.cpp can cut an attention KV
cache back to the common prefix, but not a hybrid model's recurrent state: without
snapshots every such prompt is decoded from its first token.

:class:`PrefixCache` keeps :class:`~engine.runtime.decode.snapshot.Snapshot`\\ s of
prompt prefixes, least recently used first out, within a byte budget. Before a prefill
(:meth:`PrefixCache.resume`) the session starts from whichever is longer: what the live
contexts already share with the prompt, or the snapshot sharing the most with it — on a
model that can be cut back, any snapshot (cut to the common prefix after restoring); on a
hybrid or recurrent model, only one lying wholly inside the prompt. When that is about
to throw away a live state with a real tail, the live state is saved first, so the
conversation it belonged to resumes where it was.

On hybrid and recurrent models snapshots are also taken during prefill, at the marks
(:meth:`PrefixCache.marks`): the points the request gives (a chat prompt's message
boundaries: after the system prompt, at the start of the reply; the token before the
end of a prompt that is not a chat) and every :attr:`~PrefixCache.interval` tokens
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
from dataclasses import dataclass

import numpy as np

from engine.errors import MtpStudioError
from engine.runtime.decode.session import Session, common_prefix
from engine.runtime.decode.snapshot import Snapshot, restore, take, token_key
from engine.settings import DEFAULT_PROMPT_CACHE_MB

log = logging.getLogger(__name__)

#: snapshots through long prompts on hybrid/recurrent models, every this many tokens
DEFAULT_INTERVAL = 2048
#: a live state is saved before it is thrown away only when this many tokens would be lost
MIN_TAIL = 16


@dataclass
class CacheStats:
    hits: int = 0  # prompts resumed from a snapshot
    live: int = 0  # prompts resumed from what the contexts held
    misses: int = 0  # prompts decoded from their first token
    saved: int = 0
    evicted: int = 0
    skipped: int = 0  # snapshots not taken: over the budget, or no memory for them
    restored_tokens: int = 0


class PrefixCache:
    """Snapshots of one session's prompt prefixes. Engine thread only; :meth:`info` is
    safe from any thread."""

    def __init__(self, budget_bytes: int = DEFAULT_PROMPT_CACHE_MB << 20, *, interval: int = DEFAULT_INTERVAL):
        self.budget = max(0, int(budget_bytes))
        self.interval = max(1, int(interval))
        self._entries: OrderedDict[bytes, Snapshot] = OrderedDict()  # least recently used first
        self._bytes = 0
        self.stats = CacheStats()
        self._lock = threading.Lock()  # guards the figures :meth:`info` reads

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
        snap = self._entries.get(key)
        if snap is not None:
            self._entries.move_to_end(key)
        return snap

    def best(self, prompt: np.ndarray, limit: int, *, cut: bool) -> tuple[Snapshot | None, int]:
        """The entry to resume ``prompt`` from and how many of its tokens are used (at
        most ``limit``). With ``cut`` (the model's memory can be cut back) an entry counts
        for its common prefix with the prompt; without, only an entry wholly inside it."""
        best, best_n = None, 0
        for snap in self._entries.values():  # oldest first: a later one wins a tie
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

    # ---------------------------------------------------------------- prefill
    def resume(self, session: Session, prompt: list[int], limit: int) -> int:
        """Before prefilling ``prompt`` (of which at most ``limit`` tokens may be reused):
        restore the snapshot that shares more with it than the live contexts do, saving
        the live state first when it would be lost. Returns the tokens restored (0: the
        live contexts go on, or nothing is reused)."""
        live = session.target_tokens
        cut = not session.target.model.is_recurrent
        shared = min(common_prefix(live, prompt), limit)
        live_n = shared if (cut or shared == len(live)) else 0
        snap, snap_n = self.best(np.asarray(prompt, np.int32), limit, cut=cut)
        restoring = snap is not None and snap_n > live_n
        lost = len(live) - (0 if restoring else live_n)
        if lost >= MIN_TAIL and self.enabled:
            self.save(session)
        if not restoring:
            with self._lock:
                if live_n > 0:
                    self.stats.live += 1
                else:
                    self.stats.misses += 1
            return 0
        assert snap is not None
        try:
            restore(session, snap)
        except MtpStudioError as e:  # llama.cpp refused the bytes: decode from scratch
            log.warning("prompt cache: dropped a snapshot that could not be restored: %s", e)
            self.drop(snap)
            with self._lock:
                self.stats.misses += 1
            return 0
        self._entries.move_to_end(snap.key)
        with self._lock:
            self.stats.hits += 1
            self.stats.restored_tokens += snap_n
        return snap_n

    def snapshots_in_prefill(self, session: Session) -> bool:
        """Whether prefills snapshot at marks: only where the model's memory cannot be
        cut back (on other models any snapshot serves every shorter prefix)."""
        return self.enabled and session.target.model.is_recurrent

    def marks(self, session: Session, start: int, n: int, points: tuple[int, ...]) -> list[int]:
        """Positions in ``(start, n)`` to snapshot at while prefilling a prompt of ``n``
        tokens from ``start``: the request's ``points`` and every :attr:`interval`
        tokens, where :meth:`snapshots_in_prefill`."""
        if not self.snapshots_in_prefill(session):
            return []
        out = set(points)
        out.update(range(self.interval, n, self.interval))
        return sorted(p for p in out if start < p < n)

    def save(self, session: Session) -> None:
        """Snapshot the session now, unless an entry holds the same tokens (that one is
        marked as just used) or there is no memory for it."""
        if not session.target_tokens or self.find(session.target_tokens) is not None:
            return
        try:
            snap = take(session)
        except MemoryError:
            log.warning("prompt cache: no memory for a snapshot; skipped")
            with self._lock:
                self.stats.skipped += 1
            return
        self.add(snap)

    # ------------------------------------------------------------------ report
    def info(self) -> dict:
        """Figures for the Server page and /metrics."""
        with self._lock:
            s = self.stats
            return {
                "entries": len(self._entries),
                "bytes": self._bytes,
                "budget_bytes": self.budget,
                "hits": s.hits,
                "live": s.live,
                "misses": s.misses,
                "saved": s.saved,
                "evicted": s.evicted,
                "skipped": s.skipped,
                "restored_tokens": s.restored_tokens,
            }
