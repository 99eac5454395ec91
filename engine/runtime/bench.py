"""The A/B speculation benchmark: depth 0 (plain greedy) against fixed depths and auto.

Arms run interleaved in one session, in a rotating order each run, so drift of the
machine (thermal, background load) spreads over every arm; run 0 warms up and is
discarded. Every arm's tokens are checked against plain greedy decoding for every
prompt: speculation must never change the output, and a mismatch fails the benchmark.

Runs on the engine thread (:func:`bench_job`), so the GUI's Performance page and the
CLI share it.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import Cancelled, InvalidRequestError
from engine.runtime.adaptive import AdaptiveDepth
from engine.runtime.decoder import DecodeParams, DepthPolicy, FixedDepth, Generation, generate
from engine.runtime.loader import LoadedModel

DEFAULT_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash map works, with an example in Python.",
    "List ten facts about the planet Mars.",
    "Translate to French: The weather is lovely today and we are going to the beach.",
)


@dataclass
class ArmResult:
    depth: str
    tokens_per_second: list[float] = field(default_factory=list)  # one per measured run
    drafted: int = 0
    accepted: int = 0
    rounds_by_accepted: list[int] = field(default_factory=list)
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    depth_choices: dict[int, int] = field(default_factory=dict)  # auto: rounds per depth
    mismatches: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_second) if self.tokens_per_second else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accept_len(self) -> float:
        n = sum(self.rounds_by_accepted)
        return sum(i * c for i, c in enumerate(self.rounds_by_accepted)) / n if n else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]


@dataclass
class BenchResult:
    model: str
    arms: list[ArmResult]
    runs: int
    max_tokens: int
    prompts: int

    @property
    def identical(self) -> bool:
        return all(not a.mismatches for a in self.arms)

    def arm(self, depth: str) -> ArmResult:
        return next(a for a in self.arms if a.depth == depth)

    def to_json(self) -> dict[str, Any]:
        base = self.arm("0").median if any(a.depth == "0" for a in self.arms) else 0.0
        arms = []
        for a in self.arms:
            tps = a.tokens_per_second
            arms.append(
                {
                    "depth": a.depth,
                    "tokens_per_second_median": a.median,
                    "tokens_per_second_min": min(tps) if tps else 0.0,
                    "tokens_per_second_max": max(tps) if tps else 0.0,
                    "tokens_per_second_runs": tps,
                    "speedup": a.median / base if base else 0.0,
                    "acceptance": a.acceptance,
                    "mean_accept_len": a.mean_accept_len,
                    "acceptance_by_position": a.acceptance_by_position,
                    "depth_choices": {str(k): v for k, v in sorted(a.depth_choices.items())},
                    "identical": not a.mismatches,
                    "mismatches": a.mismatches,
                }
            )
        return {
            "model": self.model,
            "runs": self.runs,
            "max_tokens": self.max_tokens,
            "prompts": self.prompts,
            "identical": self.identical,
            "arms": arms,
        }


def parse_depths(spec: str) -> list[str]:
    arms = []
    for part in spec.split(","):
        part = part.strip()
        if part == "auto" or (part.isdigit() and int(part) >= 0):
            arms.append(str(int(part)) if part != "auto" else part)
        elif part:
            raise InvalidRequestError(f"--depths: {part!r} is not a depth (use integers >= 0 and 'auto')")
    if not arms:
        raise InvalidRequestError("--depths lists no arm")
    if "0" not in arms:
        arms.insert(0, "0")  # the reference every arm is compared with
    return list(dict.fromkeys(arms))


GenerateFn = Callable[[LoadedModel, list[int], DecodeParams, str], Generation]


def _generate(lm: LoadedModel, prompt: list[int], params: DecodeParams, arm: str) -> Generation:
    return generate(lm.session, prompt, params)


def run_bench(
    lm: LoadedModel,
    *,
    arms: list[str],
    prompts: list[str],
    max_tokens: int = 128,
    runs: int = 3,
    cancel: threading.Event | None = None,
    progress: Callable[[float, str], None] | None = None,
    generate_fn: GenerateFn = _generate,
) -> BenchResult:
    """Interleaved A/B runs. ``generate_fn`` is a test seam (it can corrupt an arm)."""
    if lm.session.draft is None and any(a != "0" for a in arms):
        raise InvalidRequestError("this model was loaded without MTP; only depth 0 can be measured")
    deepest = max((int(a) for a in arms if a.isdigit()), default=0)
    if deepest > lm.max_draft_depth:
        raise InvalidRequestError(f"depth {deepest} exceeds the load's max draft depth {lm.max_draft_depth}")
    tokenized = [lm.model.tokenize(p) for p in prompts]
    policies: dict[str, DepthPolicy | None] = {}
    for a in arms:
        policies[a] = None if a == "0" else AdaptiveDepth(lm.max_draft_depth) if a == "auto" else FixedDepth(int(a))
    results = {a: ArmResult(a) for a in arms}
    reference: dict[int, list[int]] = {}
    total = (runs + 1) * len(arms) * len(prompts)
    done = 0
    for run in range(runs + 1):  # run 0 is the warm-up
        order = arms[run % len(arms) :] + arms[: run % len(arms)]
        for a in order:
            res = results[a]
            tokens = 0
            ms = 0.0
            for i, prompt in enumerate(tokenized):
                if cancel is not None and cancel.is_set():
                    raise Cancelled("benchmark cancelled")
                lm.session.reset()  # every arm pays the same prefill; nothing is reused
                policy = policies[a]
                before = policy.depth_counts.copy() if isinstance(policy, AdaptiveDepth) else None
                g = generate_fn(lm, prompt, DecodeParams(max_tokens=max_tokens, depth=policy, ignore_eog=True), a)
                if a == "0" and i not in reference:
                    reference[i] = g.tokens
                if i in reference and g.tokens != reference[i]:
                    first = next((j for j, (x, y) in enumerate(zip(g.tokens, reference[i])) if x != y), None)
                    res.mismatches.append(f"prompt {i}, run {run}: differs from depth 0 at token {first}")
                if run > 0:
                    st = g.stats
                    tokens += st.generated
                    ms += st.generation_ms
                    res.drafted += st.drafted
                    res.accepted += st.accepted
                    _add(res.rounds_by_accepted, st.accept_len_hist)
                    _add(res.drafted_at, st.drafted_at)
                    _add(res.accepted_at, st.accepted_at)
                    if isinstance(policy, AdaptiveDepth) and before is not None:
                        for k, n in (policy.depth_counts - before).items():
                            res.depth_choices[k] = res.depth_choices.get(k, 0) + n
                done += 1
                if progress is not None:
                    progress(done / total, f"run {run}/{runs}, depth {a}")
            if run > 0 and ms > 0:
                res.tokens_per_second.append(tokens / (ms / 1000.0))
    return BenchResult(lm.name, [results[a] for a in arms], runs, max_tokens, len(prompts))


def _add(into: list[int], values: list[int]) -> None:
    if len(into) < len(values):
        into.extend([0] * (len(values) - len(into)))
    for i, v in enumerate(values):
        into[i] += v


def bench_job(arms, prompts, max_tokens, runs, model: str | None = None, generate_fn: GenerateFn = _generate):
    """A function for ``jobs.Call``: runs the benchmark on the engine thread."""
    from engine.runtime import jobs as J

    def fn(state, cancel, emit):
        lm = state.get(model)
        return run_bench(
            lm,
            arms=arms,
            prompts=prompts,
            max_tokens=max_tokens,
            runs=runs,
            cancel=cancel,
            progress=lambda f, m: emit(J.Progress(f, m)),
            generate_fn=generate_fn,
        )

    return fn

