"""The generations the Performance page follows, each on its own and all together.

Plain Python, no Qt: the page feeds it on the GUI thread (a generation started, its rounds,
its end) and reads a :class:`View` to draw. A new request no longer restarts the charts:
every running request has its own :class:`Track`, and the aggregate adds them up on one
clock (tokens/s of every stream together, acceptance over all their drafts). The last few
ended requests stay to be looked at.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.facade import GenerationStats, RoundStats

WINDOW_S = 1.0  # tokens/s and acceptance are measured over the last second of rounds
#: ended requests kept to be chosen in the page's list
KEEP_ENDED = 8
#: points a series keeps: beyond it every other one is dropped (the whole span stays drawn, at
#: half the detail), so a long session's charts cost the same to draw
MAX_POINTS = 4000


class RateWindow:
    """Tokens per second and acceptance over the last :data:`WINDOW_S` seconds of rounds,
    as points over time. Rounds come in time order (one stream's, or several streams' on
    one clock)."""

    def __init__(self) -> None:
        self._recent: deque[tuple[float, int, int, int]] = deque()
        self._sums = [0, 0, 0]  # emitted, drafted, accepted over _recent
        self.emitted = 0
        self.tps: list[tuple[float, float]] = []
        self.acc: list[tuple[float, float]] = []

    def add(self, t: float, emitted: int, drafted: int, accepted: int) -> None:
        sums = self._sums
        self.emitted += emitted
        self._recent.append((t, emitted, drafted, accepted))
        sums[0] += emitted
        sums[1] += drafted
        sums[2] += accepted
        while t - self._recent[0][0] > WINDOW_S:
            _, e, d, a = self._recent.popleft()
            sums[0] -= e
            sums[1] -= d
            sums[2] -= a
        span = t - self._recent[0][0] if len(self._recent) > 1 else t
        n = sums[0] if len(self._recent) > 1 else self.emitted
        if span > 0:
            self.tps.append((t, n / span))
        if sums[1]:
            self.acc.append((t, sums[2] / sums[1]))
        for series in (self.tps, self.acc):
            if len(series) > MAX_POINTS:
                del series[1:-1:2]

    def idle(self, t: float) -> None:
        """Nothing decodes from ``t`` on: the rate drops to 0 there (a chart draws no line
        across an idle gap as if tokens had flowed), and the window starts again."""
        if self.tps and (self.tps[-1][0] < t or self.tps[-1][1] != 0.0):
            self.tps.append((t, 0.0))
        self._recent.clear()
        self._sums = [0, 0, 0]

    @property
    def rate(self) -> float:
        """Tokens per second now (the last point), 0 before any."""
        return self.tps[-1][1] if self.tps else 0.0


@dataclass
class Track:
    """One generation: its rounds' figures over its own time (seconds since it started)."""

    jid: int
    label: str
    #: when it started on the page's clock (seconds)
    t0: float
    #: MTP on and greedy: its speed counts as "MTP on" when it ends
    mtp_on: bool
    stats: GenerationStats = field(default_factory=GenerationStats)
    window: RateWindow = field(default_factory=RateWindow)
    done: bool = False

    def add(self, r: RoundStats) -> None:
        self.stats.record(r)
        self.window.add(r.t, r.emitted, r.drafted, r.accepted)


@dataclass(frozen=True)
class View:
    """What the page draws: one generation's figures, or every generation's together."""

    tps: list[tuple[float, float]]
    acc: list[tuple[float, float]]
    #: speculation counts (acceptance by position, accepted lengths, …)
    stats: GenerationStats
    emitted: int
    #: tokens per second now
    rate: float
    #: generations running now (1 for one generation's view while it runs)
    running: int


class Tracks:
    """Every followed generation by job id, and all of them together on one clock."""

    def __init__(self) -> None:
        self.tracks: dict[int, Track] = {}
        self._all = RateWindow()
        self._all_stats = GenerationStats()

    def start(self, jid: int, label: str, now: float, *, mtp_on: bool) -> Track:
        if not self.running:
            self._all.idle(now)
        track = self.tracks[jid] = Track(jid, label, now, mtp_on)
        ended = [t for t in self.tracks.values() if t.done]
        for old in ended[: max(0, len(ended) - KEEP_ENDED)]:
            del self.tracks[old.jid]
        return track

    def add(self, jid: int, rounds: list[RoundStats]) -> None:
        track = self.tracks.get(jid)
        if track is None:
            return
        for r in rounds:
            track.add(r)
            self._all_stats.record(r)
            self._all.add(track.t0 + r.t, r.emitted, r.drafted, r.accepted)

    def finish(self, jid: int, stats: GenerationStats | None) -> Track | None:
        """``jid`` ended; ``stats``: its final figures (None: it failed or was cancelled)."""
        track = self.tracks.get(jid)
        if track is not None:
            track.done = True
            if stats is not None:
                track.stats = stats
            if not self.running and track.window.tps:
                self._all.idle(track.t0 + track.window.tps[-1][0])
        return track

    @property
    def running(self) -> list[Track]:
        return [t for t in self.tracks.values() if not t.done]

    def view(self, jid: int | None = None) -> View:
        """One generation's figures (``jid``), or every generation's together (None)."""
        track = self.tracks.get(jid) if jid is not None else None
        if track is not None:
            w = track.window
            return View(w.tps, w.acc, track.stats, w.emitted, w.rate, 0 if track.done else 1)
        w = self._all
        return View(w.tps, w.acc, self._all_stats, w.emitted, w.rate if self.running else 0.0, len(self.running))


__all__ = ["Tracks", "Track", "View", "RateWindow", "WINDOW_S"]
