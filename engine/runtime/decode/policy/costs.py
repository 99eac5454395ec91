"""What a speculative round costs on this machine and model, robust at sub-millisecond rounds.

The adaptive depth policy (:mod:`engine.runtime.decode.policy.adaptive`) divides expected tokens
by these costs. At a fraction of a millisecond per round the timings are noisy in a way
means cannot take: a descheduled thread, a cache flush or the machine changing speed
mid-run (this build machine runs the demo at ~2,000 or ~3,200 tok/s from one launch to
the next) gives samples 2-10x the typical one. So every cost here is the **median of a
short window** of recent samples, and its noise is the window's median absolute
deviation:

* ``wall[K]``: the whole round at depth K, end to end — llama.cpp's calls, the rows read,
  and all the Python around them, the loop's own and the events it delivers — measured
  only in **steady** rounds (the one before was at the same depth);
* ``transition[K]``: rounds right after a change to depth K. llama.cpp rebuilds a
  context's compute graph whenever its batch width changes (on the demo one rebuild adds
  about half a target decode), so switching depth has a price of its own;
* the parts — a verify of n rows, the MTP catch-up that yields the first draft, each
  further draft step, and the Python around them per round (drafting or not) — estimate
  a depth whose wall time has not been measured yet. Verifies of widths not seen are
  extrapolated optimistically from those seen, so a deeper depth that might pay is tried
  once and then judged on its real cost.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable

from engine.runtime.decode.policy.tuning import DEFAULT_SLOPE, MIN_STEADY, TRANSITION_WINDOW, WINDOW
from engine.runtime.decode.stats import RoundStats


class Window:
    """The last ``size`` samples, with their median and median absolute deviation
    (computed when asked after a change, not per sample)."""

    __slots__ = ("xs", "_median", "_mad")

    def __init__(self, size: int = WINDOW, xs: Iterable[float] = ()):
        self.xs: deque[float] = deque(xs, maxlen=size)
        self._median: float | None = None
        self._mad: float | None = None

    def add(self, x: float) -> None:
        self.xs.append(x)
        self._median = self._mad = None

    def __len__(self) -> int:
        return len(self.xs)

    @property
    def median(self) -> float:
        if self._median is None:
            self._median = _median(self.xs)
        return self._median

    @property
    def mad(self) -> float:
        if self._mad is None:
            m = self.median
            self._mad = _median([abs(x - m) for x in self.xs])
        return self._mad

    def rel_error(self) -> float:
        """Relative standard error of the median (normal approximation from the MAD)."""
        n = len(self.xs)
        if n < 2 or self.median <= 0:
            return 1.0
        return 1.4826 * 1.2533 * self.mad / self.median / math.sqrt(n)


def _window(windows: dict[int, Window], key: int, size: int = WINDOW) -> Window:
    w = windows.get(key)
    if w is None:
        w = windows[key] = Window(size)
    return w


def _median(xs: Iterable[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return 0.0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class RoundCosts:
    """Costs in milliseconds, learned from :class:`~engine.runtime.decode.stats.RoundStats`."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.wall: dict[int, Window] = {}
        self.transition: dict[int, Window] = {}
        self.verify: dict[int, Window] = {}  # rows -> ms
        self.sync = Window()  # a steady catch-up (yields the first draft)
        self.step = Window()  # a chained draft step
        self.python = (Window(), Window())  # per round, not drafting / drafting
        self.rounds = 0  # steady rounds seen
        self.measured_at: dict[int, int] = {}  # depth -> ``rounds`` at its newest wall sample

    # ---------------------------------------------------------------- learning
    def add(self, r: RoundStats, wall_ms: float | None, steady: bool) -> None:
        """One round: its parts, and its wall time when known. Only ``steady`` rounds (the
        round before was at the same depth) teach costs; the others are transitions."""
        depth = r.depth
        if not steady:  # the first round at a width pays llama.cpp's graph set-up
            if wall_ms is not None:
                _window(self.transition, depth, TRANSITION_WINDOW).add(wall_ms)
            return
        _window(self.verify, depth + 1).add(r.verify_ms)
        if r.drafted:
            if r.sync_rows <= self.max_depth + 1:  # not a lag flush after drafting was off
                self.sync.add(r.sync_ms)
            if r.drafted >= 2:
                self.step.add((r.draft_settle_ms - r.sync_ms) / (r.drafted - 1))
        if wall_ms is not None:
            self.rounds += 1
            self.measured_at[depth] = self.rounds
            _window(self.wall, depth).add(wall_ms)
            self.python[depth > 0].add(max(0.0, wall_ms - r.verify_ms - r.draft_settle_ms))

    def add_verify(self, rows: int, ms: float) -> None:
        """A verify's time alone (for a source that keeps only these)."""
        _window(self.verify, rows).add(ms)

    # -------------------------------------------------------------- estimates
    def verify_ms(self, rows: int) -> float:
        """Measured or estimated verify time of ``rows`` rows."""
        if not self.verify:
            return 1.0 + DEFAULT_SLOPE * (rows - 1)
        return self._verify(rows, sorted(self.verify))

    def verify_table(self, n: int) -> list[float]:
        """:meth:`verify_ms` of 0..``n`` rows at once (index 0 unused), for a choice that
        weighs every width each round."""
        if not self.verify:
            return [0.0] + [1.0 + DEFAULT_SLOPE * (r - 1) for r in range(1, n + 1)]
        known = sorted(self.verify)
        return [0.0] + [self._verify(r, known) for r in range(1, n + 1)]

    def _verify(self, rows: int, known: list[int]) -> float:
        t = self.verify
        if rows in t:
            return t[rows].median
        i = bisect.bisect_left(known, rows)
        if 0 < i < len(known):
            a, b = known[i - 1], known[i]
            ta, tb = t[a].median, t[b].median
            return ta + (tb - ta) * (rows - a) / (b - a)
        # extrapolate optimistically: the smaller of the measured slope and the default
        base = t[known[0]].median
        unit = base / (1.0 + DEFAULT_SLOPE * (known[0] - 1))
        slope = DEFAULT_SLOPE * unit
        if len(known) >= 2:
            slope = min(slope, max(0.0, (t[known[-1]].median - base) / (known[-1] - known[0])))
        anchor = known[i - 1] if i else known[0]
        return max(t[anchor].median + slope * (rows - anchor), 1e-6)

    def step_ms(self) -> float:
        if self.step:
            return self.step.median
        if self.sync:
            return self.sync.median
        return DEFAULT_SLOPE * self.verify_ms(1)

    def sync_ms(self) -> float:
        return self.sync.median if self.sync else self.step_ms()

    def python_ms(self, drafting: bool) -> float:
        w = self.python[drafting]
        return w.median if w else 0.0

    def parts_ms(self, depth: int) -> float:
        """A round's cost from its parts (for depths whose wall time is not known)."""
        t = self.verify_ms(depth + 1) + self.python_ms(depth > 0)
        if depth:
            t += self.sync_ms() + (depth - 1) * self.step_ms()
        return t

    def measured(self, depth: int) -> bool:
        w = self.wall.get(depth)
        return w is not None and len(w) >= MIN_STEADY

    def round_ms(self, depth: int) -> float:
        """A steady round at ``depth``: its measured wall time, or else its parts."""
        w = self.wall.get(depth)
        return w.median if w is not None and len(w) >= MIN_STEADY else self.parts_ms(depth)

    def age(self, depth: int) -> int:
        """Steady rounds since ``depth``'s wall time was last measured."""
        return self.rounds - self.measured_at.get(depth, 0)

    def forget(self, depth: int) -> None:
        """Drop ``depth``'s wall times: it is about to be measured afresh (a try), and the
        machine may have changed speed since (its windows then compare unlike with like)."""
        self.wall.pop(depth, None)

    def rel_error(self, depth: int) -> float:
        """How uncertain :meth:`round_ms` is, relative (1.0: not measured)."""
        w = self.wall.get(depth)
        return w.rel_error() if w is not None and len(w) >= MIN_STEADY else 1.0

    def switch_ms(self, depth: int) -> float:
        """The extra time of the first round after changing to ``depth``."""
        w = self.transition.get(depth)
        if w is None or len(w) < MIN_STEADY:  # the first ones include one-off set-up
            return 0.0
        return max(0.0, w.median - self.round_ms(depth))

    # ------------------------------------------------------------ persistence
    def state(self) -> dict:
        def ws(d: dict[int, Window]) -> dict[str, list[float]]:
            return {str(k): list(w.xs) for k, w in d.items()}

        return {
            "wall": ws(self.wall),
            "transition": ws(self.transition),
            "verify": ws(self.verify),
            "sync": list(self.sync.xs),
            "step": list(self.step.xs),
            "python": [list(w.xs) for w in self.python],
        }

    @classmethod
    def from_state(cls, max_depth: int, state: dict) -> RoundCosts:
        """Raises ValueError, KeyError or TypeError when ``state`` does not fit."""

        def xs(v: object) -> list[float]:
            if not isinstance(v, list):
                raise TypeError("a window is a list")
            out = [float(x) for x in v]
            if not all(math.isfinite(x) and x >= 0 for x in out):
                raise ValueError("a cost must be a finite number >= 0")
            return out

        def ws(d: object, size: int) -> dict[int, Window]:
            if not isinstance(d, dict):
                raise TypeError("windows are a mapping")
            return {int(k): Window(size, xs(v)) for k, v in d.items()}

        c = cls(max_depth)
        c.wall = ws(state["wall"], WINDOW)
        c.transition = ws(state["transition"], TRANSITION_WINDOW)
        c.verify = ws(state["verify"], WINDOW)
        c.sync = Window(WINDOW, xs(state["sync"]))
        c.step = Window(WINDOW, xs(state["step"]))
        py = state["python"]
        if not isinstance(py, list) or len(py) != 2:
            raise TypeError("python costs are two windows")
        c.python = (Window(WINDOW, xs(py[0])), Window(WINDOW, xs(py[1])))
        return c
