"""Adaptive draft depth: MTP's gain where it exists, never its loss.

Each round the policy picks the depth K (0 = no drafting) that maximises expected
tokens per millisecond, from what it measures on this machine and model:

* acceptance ``p_i`` of draft position i given positions < i were accepted, as
  exponentially decayed counts (recent text matters more; the prior is optimistic so a
  new model gets tried, and each position's prior is the estimate of the one before).
  A position's prior fades while the position is being reached and comes back while it
  is not: a prior that kept its weight against decayed counts would hold every estimate
  above ~3%, and where a draft costs less than that (a small model on a fast machine) a
  head whose drafts are never accepted would be drafted with forever; one that faded
  for good would leave a position not reached for a while on stale evidence;
* the time of a verify batch of n rows, for each n seen (a CPU verify of 2 rows can
  cost 1.7x one row; a GPU's is nearly flat), of the MTP catch-up that yields the first
  draft, and of each further (chained) draft step.

Expected tokens of a round of depth K: ``1 + sum_{i<=K} prod_{j<=i} p_j``; its time:
``verify(K+1) + catchup + (K-1) * step`` (``verify(1)`` for K = 0). A catch-up after a
stretch without drafting feeds many entries at once; that one-off cost belongs to the
probe, not to drafting, so it does not enter the estimate. Unmeasured batch sizes are
estimated optimistically from the measured ones, so a deeper depth that might pay gets
tried once and then judged on its real cost.

Timings are noisy and the first decode at a new batch size pays llama.cpp's graph
set-up, so the first sample at each size is replaced by the second; later samples are
averaged, moving faster down than up (interference only ever makes a decode slower).
Every ``EXPLORE_EVERY`` drafting rounds a neighbouring depth is tried again — down to
K = 0 from K = 1, so plain decoding is re-measured too: a depth judged on one unlucky
sample is not ruled out forever, and one unlucky plain sample cannot keep drafting on.

When no depth beats plain decoding the policy stops drafting (the MTP context then
costs nothing but a copied hidden row per token) and probes with one draft every
``probe_gap`` tokens. A failed probe doubles the gap and an accepted one halves it and
is followed by another at once, so a head that never helps costs well under 1% and a
head that became good is back within a few probes. Probes weigh more than drafting
rounds in the estimate (a window of ~5 instead of ~50), and the evidence that turned
drafting off is cut to the weight of 5 observations, so fresh evidence soon replaces
it: near break-even, an unlucky stretch must not keep a head that pays switched off.
Output is unaffected: the decoder verifies whatever is drafted.
"""

from __future__ import annotations

import math
from collections import Counter

from engine.runtime.decode.depth import AUTO
from engine.runtime.decode.stats import RoundStats

PRIOR_P = 0.7  # optimistic prior acceptance, so drafting gets tried
PRIOR_N = 1.0  # ... worth this many observations, fading while a position is reached ...
PRIOR_FLOOR = 0.02  # ... down to this, and recovering like the counts decay while it is not
DECAY = 0.98  # per drafting round: the estimate follows the text (~50 rounds: ~20 left
# p = 0.6 and p = 0.45 too close to tell apart, so a head just above break-even flickered off)
PROBE_DECAY = 0.8  # per probe while drafting is off (~5 probes) ...
OFF_EVIDENCE = 5.0  # ... and the evidence that turned drafting off is worth as many
TIME_ALPHA = 0.2  # EMA weight of a new timing ...
TIME_ALPHA_DOWN = 0.5  # ... and of one faster than the average
DEFAULT_SLOPE = 0.15  # assumed extra cost per verify row (x verify(1)) before measuring
PROBE_MIN, PROBE_MAX = 16, 256
EXPLORE_EVERY = 12  # drafting rounds between tries of a neighbouring depth


class AdaptiveDepth:
    """Depth policy for ``draft_depth="auto"``. One per loaded model: what it learns
    about costs carries over between generations."""

    draft_depth = AUTO
    learns = True

    def __init__(self, max_depth: int = 8):
        if max_depth < 1:
            raise ValueError("max_depth must be >= 1")
        self.max_depth = max_depth
        self.reach = [0.0] * max_depth  # decayed rounds that reached position i
        self.acc = [0.0] * max_depth  # ... and accepted it
        self.prior_n = [PRIOR_N] * max_depth  # weight of each position's prior
        self.t_verify: dict[int, float] = {}  # rows -> ms
        self.n_verify: dict[int, int] = {}  # rows -> samples
        self.t_step: float | None = None  # ms per chained draft step
        self.t_sync: float | None = None  # ms of a steady-state catch-up (yields the first draft)
        self.off_tokens = 0  # tokens since drafting was switched off
        self.probe_gap = PROBE_MIN
        self._probing = False
        self._drafting = False  # the last choice was a depth > 0 (not a probe)
        self._since_explore = 0  # rounds drafted at the chosen depth since the last exploration
        self._explorations = 0
        self.depth_counts: Counter[int] = Counter()  # rounds per chosen depth (tests, GUI, bench)

    # ------------------------------------------------------------------ model
    def acceptances(self) -> list[float]:
        """Estimated conditional acceptance of each draft position. A position's prior
        is the estimate of the one before it, so a depth seldom drafted is assumed to
        behave like its neighbour until measured (not like a fixed guess)."""
        out, prior = [], PRIOR_P
        for i in range(self.max_depth):
            w = self.prior_n[i]
            prior = (self.acc[i] + prior * w) / (self.reach[i] + w)
            out.append(prior)
        return out

    def verify_ms(self, rows: int) -> float:
        """Measured or estimated verify time of ``rows`` rows."""
        t = self.t_verify
        if rows in t:
            return t[rows]
        if not t:
            return 1.0 + DEFAULT_SLOPE * (rows - 1)
        known = sorted(t)
        below = [n for n in known if n < rows]
        above = [n for n in known if n > rows]
        if below and above:
            a, b = below[-1], above[0]
            return t[a] + (t[b] - t[a]) * (rows - a) / (b - a)
        # extrapolate optimistically: the smaller of the measured slope and the default
        base = t[known[0]]
        unit = base / (1.0 + DEFAULT_SLOPE * (known[0] - 1))
        slope = DEFAULT_SLOPE * unit
        if len(known) >= 2:
            slope = min(slope, max(0.0, (t[known[-1]] - t[known[0]]) / (known[-1] - known[0])))
        anchor = below[-1] if below else above[0]
        return max(t[anchor] + slope * (rows - anchor), 1e-6)

    def step_ms(self) -> float:
        if self.t_step is not None:
            return self.t_step
        if self.t_sync is not None:
            return self.t_sync
        return DEFAULT_SLOPE * self.verify_ms(1)

    def sync_ms(self) -> float:
        return self.t_sync if self.t_sync is not None else self.step_ms()

    def rates(self) -> list[float]:
        """Expected tokens per ms at each depth 0..max_depth."""
        p = self.acceptances()
        sync, step = self.sync_ms(), self.step_ms()
        out = [1.0 / self.verify_ms(1)]
        tokens, chain = 1.0, 1.0
        for k in range(1, self.max_depth + 1):
            chain *= p[k - 1]
            tokens += chain
            out.append(tokens / (self.verify_ms(k + 1) + sync + (k - 1) * step))
        return out

    def best_depth(self) -> int:
        rates = self.rates()
        return max(range(len(rates)), key=rates.__getitem__)

    # ---------------------------------------------------------------- policy
    @property
    def idle(self) -> bool:
        return not self._drafting and bool(self.depth_counts) and 1 in self.t_verify and self.off_tokens < self.probe_gap

    def next_depth(self) -> int:
        if 1 not in self.t_verify and self.t_verify:
            k = 0  # measure plain decoding once: every ratio is relative to it
        elif not self._drafting and self.depth_counts and self.off_tokens < self.probe_gap:
            # drafting is off and no probe is due: only a probe brings news about the
            # drafts, so the choice is made again then (this round costs no estimate)
            k = 0
        else:
            k = self.best_depth()
        self._probing = False
        if k == 0:
            if self._drafting:
                self._drafting = False
                self._forget_down_to(OFF_EVIDENCE)
            if self.off_tokens >= self.probe_gap:
                self._probing = True
                k = 1
        else:
            self._drafting = True
            self._since_explore += 1
            if self._since_explore >= EXPLORE_EVERY:
                self._since_explore = 0
                up = self._explorations % 2 == 0
                self._explorations += 1
                k = min(k + 1, self.max_depth) if up else k - 1
        self.depth_counts[k] += 1
        return k

    def _forget_down_to(self, n: float) -> None:
        """Keep each position's estimate but make it worth at most ``n`` observations."""
        for i, reach in enumerate(self.reach):
            if reach > n:
                self.acc[i] *= n / reach
                self.reach[i] = n

    def observe(self, r: RoundStats) -> None:
        rows = r.depth + 1
        n = self.n_verify.get(rows, 0) + 1
        self.n_verify[rows] = n
        # the first sample at a new size includes graph set-up: the second replaces it
        self.t_verify[rows] = r.verify_ms if n <= 2 else _ema(self.t_verify[rows], r.verify_ms)
        if r.drafted:
            if r.sync_rows <= self.max_depth + 1:  # not a lag flush after drafting was off
                self.t_sync = _ema(self.t_sync, r.sync_ms)
            if r.drafted >= 2:
                self.t_step = _ema(self.t_step, (r.draft_ms - r.sync_ms) / (r.drafted - 1))
            decay = PROBE_DECAY if self._probing else DECAY
            reached = min(r.drafted, r.accepted + 1)
            for i in range(self.max_depth):
                self.reach[i] *= decay
                self.acc[i] *= decay
                w = self.prior_n[i]
                if i < reached:
                    self.reach[i] += 1.0
                    self.acc[i] += 1.0 if i < r.accepted else 0.0
                    self.prior_n[i] = max(w * decay, PRIOR_FLOOR)
                else:
                    self.prior_n[i] = w + (PRIOR_N - w) * (1 - decay)
        if r.depth == 0:
            self.off_tokens += r.emitted
        elif self._probing:
            if r.accepted:  # drafts may have become good: probe again at once
                self.probe_gap = max(self.probe_gap // 2, PROBE_MIN)
                self.off_tokens = self.probe_gap
            else:
                self.probe_gap = min(self.probe_gap * 2, PROBE_MAX)
                self.off_tokens = 0
        else:
            self.off_tokens = 0
            self.probe_gap = PROBE_MIN


    # ------------------------------------------------------------- persistence
    #: what is learned (the rest is per-generation bookkeeping)
    _LEARNED = ("reach", "acc", "prior_n", "t_step", "t_sync", "off_tokens", "probe_gap", "_drafting")

    def state(self) -> dict:
        """What this policy has learned, as plain JSON (engine.runtime.decode.policystore)."""
        out = {k: getattr(self, k) for k in self._LEARNED}
        out["max_depth"] = self.max_depth
        out["t_verify"] = {str(k): v for k, v in self.t_verify.items()}
        out["n_verify"] = {str(k): v for k, v in self.n_verify.items()}
        return out

    @classmethod
    def from_state(cls, max_depth: int, state: object) -> AdaptiveDepth:
        """A policy that starts from ``state``; a fresh one when it does not fit."""
        policy = cls(max_depth)
        try:
            if not isinstance(state, dict) or state.get("max_depth") != max_depth:
                return policy
            for key in ("reach", "acc", "prior_n"):
                values = [float(x) for x in state[key]]
                if len(values) != max_depth or not all(math.isfinite(x) and x >= 0 for x in values):
                    return policy
                setattr(policy, key, values)
            policy.t_verify = {int(k): float(v) for k, v in state["t_verify"].items() if float(v) > 0}
            policy.n_verify = {int(k): int(v) for k, v in state["n_verify"].items()}
            for key in ("t_step", "t_sync"):
                v = state.get(key)
                setattr(policy, key, None if v is None else float(v))
            policy.off_tokens = int(state["off_tokens"])
            policy.probe_gap = min(max(int(state["probe_gap"]), PROBE_MIN), PROBE_MAX)
            policy._drafting = bool(state["_drafting"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return cls(max_depth)
        return policy


def _ema(old: float | None, new: float) -> float:
    if old is None:
        return new
    return old + (TIME_ALPHA_DOWN if new < old else TIME_ALPHA) * (new - old)
