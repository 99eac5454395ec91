"""Where a generation's time goes, round by round (``mtp-studio bench --profile``).

While a :class:`Profiler` is attached to a loaded model, every call the decode loop makes
into llama.cpp and numpy is timed by what it is for, and the rest of the time is split
into the loop's own Python work inside rounds and the time between rounds:

* ``target decode`` / ``mtp decode``: ``llama_decode`` on the target and the MTP context;
* ``logits and hidden reads``: reading rows out of llama.cpp (argmax, logits, hidden
  states: copies and numpy reductions over the vocabulary);
* ``sampling``: the sampler (greedy argmax over a copied row, or a draw);
* ``grammar``: llguidance masks and forced tokens, for constrained output;
* ``python between calls``: the rest of the generation's time — the loop's bookkeeping,
  stop checks, statistics, events to the caller — measured as the generation's time
  minus the timed calls. (ggml's threads waking up for a call shows inside the decode
  times: it is llama.cpp's time, not Python's.)

Timers are attached to the model's own objects for the duration of a measured run and
removed after, so decoding without the profiler pays nothing. The timers themselves cost
about a microsecond a call, which lands in ``python between calls``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engine.runtime.decode.grammar import Constraint
from engine.runtime.decode.loop import Decoded
from engine.runtime.decode.sampling import Sampler
from engine.runtime.load.loader import LoadedModel

#: the parts, in the order they are printed
PARTS = ("target decode", "mtp decode", "logits and hidden reads", "sampling", "grammar", "python between calls")
_READS = ("logits", "argmax", "argmax_rows", "hidden_rows", "hidden_row")


class Profiler:
    """Seconds per part, summed over the runs measured with :meth:`attach`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tokens = 0
        self.rounds = 0
        #: timing only after the prompt: set by the session's first phase that is not prefill
        self.active = False

    def _timed(self, part: str, fn: Callable) -> Callable:
        seconds = self.seconds

        def timed(*a, **kw):
            if not self.active:
                return fn(*a, **kw)
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                seconds[part] += time.perf_counter() - t

        return timed

    def _on_phase(self, name: str) -> None:
        if name != "prefill":
            self.active = True

    @contextmanager
    def attach(self, lm: LoadedModel) -> Iterator[None]:
        """Time the model's contexts, the sampler and the grammar while one generation runs
        (from its first round on: the prompt is not a round)."""
        self.active = False
        lm.session.phase_hook = self._on_phase
        patched: list[tuple[object, str]] = []
        classes: list[tuple[type, str, object]] = []
        s = lm.session
        for ctx, part in ((s.target, "target decode"), (s.draft, "mtp decode")):
            if ctx is None:
                continue
            setattr(ctx, "decode", self._timed(part, ctx.decode))
            patched.append((ctx, "decode"))
            for name in _READS:
                setattr(ctx, name, self._timed("logits and hidden reads", getattr(ctx, name)))
                patched.append((ctx, name))
        for cls, names, part in (
            (Sampler, ("sample", "dense", "sample_dense"), "sampling"),
            (Constraint, ("allowed", "forced"), "grammar"),
        ):
            for name in names:
                real = cls.__dict__[name]
                classes.append((cls, name, real))
                setattr(cls, name, self._timed(part, real))  # unbound: the instance comes first in *a
        try:
            yield
        finally:
            lm.session.phase_hook = None
            self.active = False
            for obj, name in patched:
                delattr(obj, name)  # the class's method shows through again
            for cls, name, real in classes:
                setattr(cls, name, real)

    def add(self, g: Decoded, calls_before: float) -> None:
        """Account one measured generation: its time not spent in timed calls is Python's.
        ``calls_before``: :meth:`calls_total` before the generation ran."""
        st = g.stats
        self.seconds["python between calls"] += max(0.0, st.generation_ms / 1000 - (self.calls_total() - calls_before))
        self.tokens += st.generated
        self.rounds += st.rounds

    def calls_total(self) -> float:
        return sum(v for k, v in self.seconds.items() if k != "python between calls")

    def to_json(self) -> dict:
        per_token = {p: 1000 * self.seconds.get(p, 0.0) / max(self.tokens, 1) for p in PARTS}
        total = sum(per_token.values())
        return {
            "ms_per_token": per_token,
            "share": {p: (v / total if total else 0.0) for p, v in per_token.items()},
            "ms_per_round": 1000 * sum(self.seconds.values()) / max(self.rounds, 1),
            "tokens_per_round": self.tokens / max(self.rounds, 1),
            "tokens": self.tokens,
            "rounds": self.rounds,
        }
