"""Which models are loaded: loaded when a request names one, unloaded when idle.

:class:`Residency` stands between the endpoint (or the app) and the engine. A request
takes a :class:`Lease` on the model it names (:meth:`Residency.acquire`): a loaded model
is leased at once; one that is not is loaded first (one load however many requests ask
at once: the others wait for it). Before a load, room is made: the load's memory estimate
plus those of the models already loaded must stay within the budget, and the number of
loaded models within ``max_loaded``; idle models are unloaded least recently used first to
make it. A model with a lease is never unloaded, nor one that is loading; when even
unloading every idle model would not make room the request is refused in words with the
figures (no evict-and-retry loop).

When its last lease ends, a model's expiry is set: the request's keep-alive (Ollama's
``keep_alive``, LM Studio's ``ttl``) or the idle TTL; ``0`` unloads it now, a negative one
keeps it. A thread of its own unloads expired models. Models loaded outside the residency
(the app's Load, ``serve --model``) are pinned: never unloaded for room or time, only by a
request that says so (``keep_alive: 0``) or by hand.

Loads and unloads are engine jobs (a load builds off the engine's stepping path, so the
streams of other models go on: engine.runtime.engine). Any thread; every method that
waits for the engine blocks its caller (the endpoint calls them from a worker thread).
Ownership: everything here is guarded by ``_cv``; the engine owns the models themselves.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.errors import InsufficientMemoryError, InvalidRequestError, NoModelLoadedError
from engine.runtime import jobs as J
from engine.runtime.load.loader import LoadSpec
from engine.runtime.ondemand.catalog import AmbiguousModelError, Catalog, Servable

log = logging.getLogger(__name__)

#: LM Studio's idle TTL for models loaded on demand (lmstudio.ai/docs: ttl-and-auto-evict)
DEFAULT_IDLE_TTL_S = 3600.0
#: models loaded at once by default (Ollama: OLLAMA_MAX_LOADED_MODELS, 3 per GPU)
DEFAULT_MAX_LOADED = 3
#: share of the machine's memory loaded models' estimates may take, by default
BUDGET_SHARE = 0.85
FOREVER = float("inf")
#: how long the reaper waits before it tries again an unload the engine refused
RETRY_S = 5.0


def parse_keep_alive(value) -> float | None:
    """Seconds a model stays loaded after a request: Ollama's ``keep_alive`` (a number of
    seconds, or a duration such as ``"10m"``, ``"1h30m"``, ``"45s"``; negative: forever; 0:
    unload now) or LM Studio's ``ttl`` (seconds). None when not given."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidRequestError(
            "keep_alive must be a duration such as '5m', a number of seconds, or -1 (keep loaded)"
        )
    if isinstance(value, (int, float)) and math.isfinite(value):
        return FOREVER if value < 0 else float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            n = float(text)
            if math.isfinite(n):
                return FOREVER if n < 0 else n
        except ValueError:
            pass
        if text.startswith("-"):
            return FOREVER
        units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        total, num, i = 0.0, "", 0
        ok = bool(text)
        while i < len(text):
            c = text[i]
            if c.isdigit() or c == ".":
                num += c
                i += 1
                continue
            unit = "ms" if text.startswith("ms", i) else c
            if not num or unit not in units or num.count(".") > 1:
                ok = False
                break
            total += float(num) * units[unit]
            num = ""
            i += len(unit)
        if ok and not num:
            return total
    raise InvalidRequestError(
        f"keep_alive {value!r} is not a duration: use seconds (300), a duration ('5m', '1h30m'), 0 to unload "
        "after the reply, or -1 to keep the model loaded"
    )


@dataclass
class Resident:
    """One loaded (or loading, or unloading) model's bookkeeping."""

    name: str
    servable: Servable | None  # None: loaded outside the residency
    state: str = "loading"  # loading | loaded | unloading
    users: int = 0  # leases held now
    requests: int = 0  # leases taken since it loaded
    last_used: float = 0.0  # monotonic: when its last lease ended (or it loaded)
    expires: float = FOREVER  # monotonic; FOREVER: never
    pinned: bool = False
    memory: int = 0  # the load's memory estimate, bytes


@dataclass(frozen=True)
class ResidentInfo:
    """One loaded (or loading, or unloading) model as other threads see it."""

    name: str
    state: str  # loading | loaded | unloading
    memory_bytes: int  # the load's memory estimate
    requests: int  # leases taken since it loaded
    users: int  # leases held now
    idle_s: float  # since its last lease ended (0 while one is held)
    expires_in_s: float | None  # until it is unloaded; None: never (a request holds it, or kept)
    pinned: bool  # loaded outside the residency: unloaded only by hand or by a request's keep_alive 0
    on_demand: bool  # loaded by the residency for a request


@dataclass
class Lease:
    """A request's hold on a loaded model: it is not unloaded until every lease ends.
    :meth:`release` once (later calls do nothing)."""

    residency: Residency
    name: str
    keep_alive: float | None = None
    #: the bookkeeping of the model this lease holds (not another load of the same name)
    resident: Resident | None = field(default=None, repr=False)
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.residency._release(self)


class Residency:
    """Loads on demand and unloads when idle (see the module docstring)."""

    def __init__(
        self,
        engine,
        catalog: Catalog,
        spec_for: Callable[[Servable], LoadSpec],
        *,
        max_loaded: int = DEFAULT_MAX_LOADED,
        idle_ttl: float | None = DEFAULT_IDLE_TTL_S,
        memory_budget: int | None = None,
        estimate: Callable[[Servable, LoadSpec], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_loaded < 1:
            raise ValueError("max_loaded must be at least 1")
        self.engine = engine
        self.catalog = catalog
        self.spec_for = spec_for
        self.max_loaded = max_loaded
        self.idle_ttl = FOREVER if idle_ttl is None or idle_ttl < 0 else float(idle_ttl)
        self.memory_budget = memory_budget if memory_budget is not None else default_budget()
        self._estimate = estimate or estimate_bytes
        self.clock = clock
        self._cv = threading.Condition(threading.Lock())
        self._residents: dict[str, Resident] = {}
        self._closed = False
        self._reaper = threading.Thread(target=self._reap, name="mtp-residency", daemon=True)
        self._reaper.start()

    # ----------------------------------------------------------------- naming
    def resolve(self, name: str) -> tuple[str, Servable | None]:
        """(the loaded name, its servable) for what a request calls a model: a loaded
        model's own name, else a catalog model (by any of its names; loaded under its
        canonical name, or already loaded from the same file under another).
        :class:`NoModelLoadedError` (a 404) for a name nothing answers to."""
        loaded = self.engine.models()
        bare = name.removesuffix(":latest")
        for lname in (name, bare):
            if lname in loaded:  # a loaded model's own name wins over any alias
                try:
                    return lname, self.catalog.find(lname)
                except AmbiguousModelError:
                    return lname, None
        s = self.catalog.find(name)
        if s is None:
            known = ", ".join(sorted({*loaded, *(x.name for x in self.catalog.items())})) or "none"
            raise NoModelLoadedError(f"No model is named {name!r} here (models: {known}). See GET /v1/models.")
        for lname, info in loaded.items():
            if info.path == str(s.path):
                return lname, s
        return s.name, s

    # ----------------------------------------------------------------- leases
    def try_acquire(self, name: str, *, keep_alive: float | None = None) -> Lease | None:
        """A lease on ``name`` at once when it is a loaded model's own name and nothing holds
        the books (no catalog read, no wait: the event loop asks this first, sparing a worker
        thread's round trip per request); None otherwise (then :meth:`acquire`)."""
        loaded = self.engine.models()
        lname = next((n for n in (name, name.removesuffix(":latest")) if n in loaded), None)
        if lname is None or not self._cv.acquire(blocking=False):
            return None
        try:
            self._sync_locked()
            r = self._residents.get(lname)
            if r is None or r.state != "loaded":
                return None
            r.users += 1
            r.requests += 1
            return Lease(self, lname, keep_alive, r)
        finally:
            self._cv.release()

    def acquire(self, name: str, *, keep_alive: float | None = None, cancel: threading.Event | None = None) -> Lease:
        """A lease on the model ``name`` means, loading it first when it is not loaded
        (waiting for a load already under way). Raises what the load raises, and
        :class:`InsufficientMemoryError` when no room can be made."""
        lname, s = self.resolve(name)
        spec: LoadSpec | None = None
        need: int | None = None  # what a load would take: worked out only when one is needed
        while True:
            victims: list[str] = []
            with self._cv:
                self._sync_locked()
                r = self._residents.get(lname)
                if r is not None and r.state == "loaded":
                    r.users += 1
                    r.requests += 1
                    return Lease(self, lname, keep_alive, r)
                if r is not None:  # loading or unloading: wait for it to settle
                    self._cv.wait(0.5)
                    if cancel is not None and cancel.is_set():
                        raise InvalidRequestError("The request was cancelled while its model loaded.")
                    continue
                if s is None:
                    raise NoModelLoadedError(f"Model {name!r} is not loaded.")
                if need is not None:
                    victims = self._room_locked(s, need)
                    for v in victims:
                        self._residents[v].state = "unloading"
                    self._residents[lname] = Resident(lname, s, state="loading", memory=need)
                    break
            # a load is needed: what it would take, worked out outside the lock (it reads the
            # file's header: a few ms of the GIL, never spent on a request to a loaded
            # model); then the residents are looked at again
            spec = self.spec_for(s)
            need = self._estimate(s, spec)
        assert spec is not None
        try:
            for v in victims:
                log.info("unloading %s to make room for %s", v, lname)
                self._unload_now(v)
            info = self.engine.submit(J.LoadModel(spec, replace=False)).result()
        except BaseException as e:
            with self._cv:
                self._residents.pop(lname, None)
                loaded = self.engine.models()
                for v in victims:  # those not unloaded (an unload that failed first) stay as they were
                    rv = self._residents.get(v)
                    if rv is not None and rv.state == "unloading" and v in loaded:
                        rv.state = "loaded"
                self._cv.notify_all()
            raise e
        with self._cv:
            now = self.clock()
            r = self._residents[lname]
            r.state, r.last_used = "loaded", now
            r.memory = info.memory_bytes or r.memory
            r.users, r.requests = 1, 1
            self._cv.notify_all()
        log.info("loaded %s on demand", lname)
        return Lease(self, lname, keep_alive, r)

    def _release(self, lease: Lease) -> None:
        with self._cv:
            r = self._residents.get(lease.name)
            if r is None or r is not lease.resident:
                return  # unloaded (and perhaps loaded again) meanwhile: not this lease's model
            r.users = max(0, r.users - 1)
            now = self.clock()
            r.last_used = now
            ttl = lease.keep_alive
            if ttl is None or r.pinned and ttl != 0:  # a pinned model goes only by hand or keep_alive 0
                ttl = FOREVER if r.pinned else self.idle_ttl
            if r.users == 0 or lease.keep_alive is not None:
                r.expires = now + ttl if ttl != FOREVER else FOREVER
            self._cv.notify_all()  # the reaper: an expiry changed

    def _room_locked(self, s: Servable, need: int) -> list[str]:
        """The idle models to unload (least recently used first) so that ``s`` fits; an
        :class:`InsufficientMemoryError` in words when it cannot."""
        others = [r for r in self._residents.values() if r.state != "unloading"]
        used = sum(r.memory for r in others)
        count = len(others)
        idle = sorted(
            (r for r in others if r.state == "loaded" and r.users == 0 and not r.pinned), key=lambda r: r.last_used
        )
        victims: list[str] = []
        while idle and (used + need > self.memory_budget or count + 1 > self.max_loaded):
            r = idle.pop(0)
            victims.append(r.name)
            used -= r.memory
            count -= 1
        if used + need > self.memory_budget:
            held = [r for r in others if r.name not in victims]
            rows = [
                f"{r.name}: {_gib(r.memory)}" + (" busy" if r.users else " pinned" if r.pinned else "") for r in held
            ]
            raise InsufficientMemoryError(
                f"{s.name} needs about {_gib(need)} and the models that stay loaded take {_gib(used)} of the "
                f"{_gib(self.memory_budget)} budget"
                + (f" ({', '.join(rows)})" if held else "")
                + ". Unload a model, wait for running requests to end, or raise the memory budget.",
                {"need_bytes": need, "used_bytes": used, "budget_bytes": self.memory_budget},
            )
        if count + 1 > self.max_loaded:
            raise InsufficientMemoryError(
                f"{s.name} cannot load: {count} models are loaded and busy or pinned, and at most {self.max_loaded} "
                "may be loaded at once. Wait for their requests to end, unload one, or raise the limit "
                "(serve --max-models).",
                {"loaded": count, "max_loaded": self.max_loaded},
            )
        return victims

    def _sync_locked(self) -> None:
        """Bring the bookkeeping in line with what the engine has loaded: models loaded
        outside the residency are pinned; those unloaded elsewhere are forgotten."""
        loaded = self.engine.models()
        for name, info in loaded.items():
            if name not in self._residents:
                now = self.clock()
                self._residents[name] = Resident(
                    name, None, state="loaded", last_used=now, pinned=True, memory=info.memory_bytes
                )
        for name, r in list(self._residents.items()):
            if r.state == "loaded" and name not in loaded:
                del self._residents[name]

    # ----------------------------------------------------------------- unloads
    def unload(self, name: str) -> None:
        """Unload ``name`` now (after its running requests end: the engine waits for them).
        Returns once it is unloaded, also when its unload was already under way (its
        expiry came first); a model that is loading is unloaded once loaded."""
        with self._cv:
            while True:
                self._sync_locked()
                r = self._residents.get(name)
                if r is None:
                    raise NoModelLoadedError(f"Model {name!r} is not loaded.")
                if r.state == "loaded":
                    r.state = "unloading"
                    break
                state = r.state
                self._cv.wait(0.5)
                if state == "unloading" and name not in self._residents:
                    return
        self._unload_now(name)

    def _unload_now(self, name: str) -> None:
        try:
            self.engine.submit(J.UnloadModel(name)).result()
        except NoModelLoadedError:
            pass
        finally:
            with self._cv:
                r = self._residents.get(name)
                if r is not None and r.state == "unloading":
                    if name in self.engine.models():
                        r.state = "loaded"  # the unload failed (the engine refused it): still here
                    else:
                        del self._residents[name]
                self._cv.notify_all()

    def _reap(self) -> None:
        """The reaper's thread: unloads idle models whose expiry has passed."""
        while True:
            with self._cv:
                if self._closed:
                    return
                now = self.clock()
                due = [r for r in self._residents.values() if r.state == "loaded" and r.users == 0 and r.expires <= now]
                for r in due:
                    r.state = "unloading"
                if not due:
                    nxt = min(
                        (r.expires for r in self._residents.values() if r.state == "loaded" and r.users == 0),
                        default=FOREVER,
                    )
                    self._cv.wait(None if nxt == FOREVER else max(0.01, min(nxt - now, 60.0)))
                    continue
            for r in due:
                log.info("unloading %s: idle past its keep-alive", r.name)
                try:
                    self._unload_now(r.name)
                except Exception:
                    log.exception("could not unload %s; trying again in %g s", r.name, RETRY_S)
                    with self._cv:
                        r.expires = self.clock() + RETRY_S

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._reaper.join(timeout=5)

    # ----------------------------------------------------------------- reading
    def loaded(self) -> list[ResidentInfo]:
        """The loaded (and loading) models, most recently used first. Any thread."""
        with self._cv:
            self._sync_locked()
            now = self.clock()
            out = []
            for r in sorted(self._residents.values(), key=lambda r: -r.last_used):
                idle = 0.0 if r.users else max(0.0, now - r.last_used)
                expires_in = max(0.0, r.expires - now) if r.users == 0 and r.expires != FOREVER else None
                out.append(
                    ResidentInfo(
                        r.name,
                        r.state,
                        r.memory,
                        r.requests,
                        r.users,
                        idle,
                        expires_in,
                        r.pinned,
                        r.servable is not None,
                    )
                )
            return out


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"


def estimate_bytes(s: Servable, spec: LoadSpec) -> int:
    """What loading ``s`` with ``spec`` takes (engine.runtime.load.fit's estimate, every
    slot's KV cache included)."""
    from engine.gguf.shards import open_set
    from engine.runtime.load import fit

    try:
        f = fit.fit_of_set(
            open_set(s.path), spec.n_ctx * max(1, spec.parallel), mtp=s.head is not None or s.mtp != "none"
        )
        return int(f.estimate.total_bytes)
    except Exception:  # an estimate that cannot be made counts the file's size
        return s.size


def default_budget() -> int:
    """:data:`BUDGET_SHARE` of the memory models load into: the GPUs' when the build has
    any, else the host's."""
    from engine.runtime.load import fit

    devices = fit.machine_devices()
    gpus = [d for d in devices if d.kind == "gpu"]
    if gpus:
        return int(BUDGET_SHARE * sum(d.total for d in gpus))
    return int(BUDGET_SHARE * devices[0].total)
