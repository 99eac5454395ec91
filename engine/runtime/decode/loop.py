"""Greedy decoding, plain or with native MTP speculation, over a :class:`Session`.

Speculative round (draft depth K, ``MTP.md``): the MTP head drafts d1..dK from the
target's hidden states; the target verifies ``[id_last, d1..dK]`` in one batch; the
longest prefix with ``d_{i+1} == argmax(row i)`` (a tokens) is accepted and ``t_a`` is
emitted after it; the target rolls back the rest; the MTP context catches up on the
accepted tokens with the target's own hidden states. The output is exactly what plain
greedy decoding emits: every emitted token is the target's argmax given the tokens
before it.

Cancellation is checked at every phase boundary (prefill chunks, each draft step,
before verify, before commit); whatever the phase, the contexts end holding exactly
the emitted tokens, so the next turn of the conversation continues correctly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.errors import Cancelled
from engine.runtime.llama.batch import LOGITS_ALL, LOGITS_LAST
from engine.runtime.decode.sampling import ACCEPT, DRAFT, RESIDUAL, Sampler, SamplingParams
from engine.runtime.decode.session import Session
from engine.runtime.decode.stats import GenerationStats, RoundStats
from engine.runtime.decode.stopping import STOP_CANCELLED, STOP_CONTEXT_FULL, Pushed, StopChecker


#: most MTP entries caught up before a draft; older ones (left while drafting was off)
#: become holes in the MTP context
CATCH_UP_LIMIT = 16


class DepthPolicy(Protocol):
    """Chooses the draft depth of each round (0 = no drafting)."""

    name: str
    max_depth: int

    def next_depth(self) -> int: ...

    def observe(self, r: RoundStats) -> None: ...

    @property
    def idle(self) -> bool:
        """Drafting is off and will not resume before a probe: the prompt's MTP entries
        can wait in the lag (only the newest are ever fed) instead of being fed now."""
        ...


class FixedDepth:
    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError("draft depth must be >= 1")
        self.depth = depth
        self.max_depth = depth
        self.name = str(depth)

    def next_depth(self) -> int:
        return self.depth

    def observe(self, r: RoundStats) -> None:
        pass

    @property
    def idle(self) -> bool:
        return False


@dataclass
class DecodeParams:
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: None: plain decoding; a policy: MTP speculation (greedy or sampled)
    depth: DepthPolicy | None = None
    #: while sampling: draft by sampling the MTP head and accept by rejection sampling
    #: (exact in distribution; not token-for-token equal to plain sampling with the same
    #: seed). Off: argmax drafts accepted while the sampled target token equals them.
    sampled_draft: bool = False
    ignore_eog: bool = False
    #: tokens that end the reply like end-of-generation (a chat template's turn markers)
    end_tokens: frozenset[int] = frozenset()


@dataclass
class Generation:
    tokens: list[int]
    text: str
    stats: GenerationStats

    @property
    def stop_reason(self) -> str:
        return self.stats.stop_reason


EmitFn = Callable[[list[int], str], None]
RoundFn = Callable[[RoundStats], None]


def generate(
    session: Session,
    prompt: list[int],
    params: DecodeParams,
    *,
    cancel: threading.Event | None = None,
    on_emit: EmitFn | None = None,
    on_round: RoundFn | None = None,
) -> Generation:
    """Generate after ``prompt``. Speculation is used when ``params.depth`` is set and
    the session has an MTP context, greedy or sampling."""
    model = session.target.model
    spec = params.depth is not None and session.draft is not None
    greedy = params.sampling.greedy
    stats = GenerationStats(
        mtp="on" if spec else "off",
        draft_depth=_depth_label(params.depth) if spec else 0,
        prompt_tokens=len(prompt),
        sampled=not greedy,
        sampled_draft=spec and not greedy and params.sampled_draft,
    )
    is_end = model.is_eog
    if params.end_tokens:
        ends = params.end_tokens
        is_end = lambda t: t in ends or model.is_eog(t)  # noqa: E731
    checker = StopChecker(
        model.piece, is_end, max_tokens=params.max_tokens, stop=params.stop, ignore_eog=params.ignore_eog
    )
    repairs0 = session.repairs
    t0 = time.perf_counter()
    run = _Run(session, params, checker, stats, cancel, on_emit, on_round)
    if not greedy:
        stats.seed = run.sampler.seed
    first = None if greedy else (lambda logits: run.sampler.sample(logits, len(prompt)))
    try:
        idle = spec and params.depth is not None and params.depth.idle
        pf = session.prefill(prompt, speculative=spec, cancel=cancel, choose_first=first,
                             defer_mtp=CATCH_UP_LIMIT if idle else None)  # fmt: skip
    except Cancelled:
        stats.stop_reason = STOP_CANCELLED
        stats.prompt_ms = (time.perf_counter() - t0) * 1000
        return Generation([], "", stats)
    stats.prompt_tokens_reused = pf.reused
    run.t_gen = time.perf_counter()
    stats.prompt_ms = (run.t_gen - t0) * 1000
    if params.max_tokens <= 0:
        stats.stop_reason = "max_tokens"
    elif spec:
        assert params.depth is not None
        run.speculative(pf.first_token, params.depth)
    else:
        run.plain(pf.first_token)
    stats.generation_ms = (time.perf_counter() - run.t_gen) * 1000
    stats.rollback_repairs = session.repairs - repairs0
    stats.generated = len(checker.tokens)
    stats.stop_reason = checker.stop_reason or stats.stop_reason
    return Generation(list(checker.tokens), checker.text, stats)


def _depth_label(policy: DepthPolicy | None) -> int | str:
    if policy is None:
        return 0
    return int(policy.name) if policy.name.isdigit() else policy.name


class _Run:
    """One generation's loops (state shared by the plain and speculative paths)."""

    def __init__(self, session, params, checker, stats, cancel, on_emit, on_round):
        self.s: Session = session
        self.p: DecodeParams = params
        self.checker: StopChecker = checker
        self.stats: GenerationStats = stats
        self.cancel = cancel
        self.on_emit = on_emit
        self.on_round = on_round
        self.sampler = Sampler(params.sampling)
        self.t_gen = 0.0

    def _emit(self, tokens: list[int], text: str) -> None:
        if self.on_emit is not None and (tokens or text):
            self.on_emit(tokens, text)

    def _finish(self, reason: str) -> None:
        self._emit([], self.checker.finish(reason))

    def _round(self, r: RoundStats) -> None:
        self.stats.record(r)
        if self.on_round is not None:
            self.on_round(r)

    def _push(self, tokens: list[int]) -> tuple[int, str | None]:
        """Offer tokens to the stop checker; emit what passes. Returns (emitted count,
        stop reason)."""
        out: list[int] = []
        text = []
        stop = None
        for tok in tokens:
            r: Pushed = self.checker.push(tok)
            if r.emitted:
                out.append(tok)
            text.append(r.text)
            if r.stop:
                stop = r.stop
                break
        self._emit(out, "".join(text))
        return len(out), stop

    # ------------------------------------------------------------------ plain
    def plain(self, tok: int) -> None:
        s = self.s
        n_ctx = s.n_ctx
        index = 0
        while True:
            _, stop = self._push([tok])
            if stop:
                return
            if len(s.target_tokens) + 1 >= n_ctx:
                self._finish(STOP_CONTEXT_FULL)
                return
            try:
                s.phase("decode", self.cancel)
            except Cancelled:
                self._finish(STOP_CANCELLED)
                return
            t = time.perf_counter()
            s.decode_target([tok], logits=LOGITS_LAST, hidden=False)
            logits = s.target.logits(-1)
            tok = self.sampler.sample(logits, len(s.target_tokens))
            now = time.perf_counter()
            self.stats.target_forwards += 1
            self._round(RoundStats(index=index, depth=0, drafted=0, accepted=0, emitted=1, draft_ms=0.0,
                                   verify_ms=(now - t) * 1000, t=now - self.t_gen))  # fmt: skip
            index += 1

    # ------------------------------------------------------------ speculative
    def speculative(self, id_last: int, policy: DepthPolicy) -> None:
        s = self.s
        n_ctx = s.n_ctx
        _, stop = self._push([id_last])
        index = 0
        while stop is None:
            pos0 = len(s.target_tokens)  # position of id_last (emitted, not yet decoded)
            if pos0 + 1 >= n_ctx:
                self._finish(STOP_CONTEXT_FULL)
                break
            remaining = self.checker.max_tokens - len(self.checker.tokens)
            # the verify batch may fill the context up to n_ctx - 1 tokens, as plain decoding does
            k = max(0, min(policy.next_depth(), remaining - 1, n_ctx - 2 - pos0, s.target.n_batch - 1))
            try:
                stop = self._spec_round(index, id_last, pos0, k, policy)
            except Cancelled:
                self._finish(STOP_CANCELLED)
                stop = STOP_CANCELLED
            if stop is None:
                id_last = s.lag.tokens[-1]
            index += 1
        # Entries still in the lag are fed by the next prefill if it needs them.

    def _spec_round(self, index: int, id_last: int, pos0: int, k: int, policy: DepthPolicy) -> str | None:
        s = self.s
        t0 = time.perf_counter()
        drafts: list[int] = []
        sync_rows, sync_ms = 0, 0.0
        sampled_draft = self.stats.sampled_draft
        draft_q: list[np.ndarray] = []  # the head's sampling distribution per draft (sampled drafts)

        def pick(pos: int):
            if not sampled_draft:
                return None  # the head's argmax

            def choose(logits: np.ndarray) -> int:
                q = self.sampler.dense(logits)
                draft_q.append(q)
                return self.sampler.sample_dense(q, pos, DRAFT)

            return choose

        if k >= 1:
            s.phase("draft", self.cancel)
            sync_rows = len(s.lag.tokens)
            s.sync_draft(logits_last=True, keep_last=CATCH_UP_LIMIT)  # entries up to id_last; yields d1
            sync_ms = (time.perf_counter() - t0) * 1000
            d, h = s.draft_head(pick(pos0 + 1))
            drafts.append(d)
            try:
                for j in range(1, k):
                    s.phase("draft", self.cancel)
                    d, h = s.draft_step(d, h, pick(pos0 + 1 + j))
                    drafts.append(d)
            finally:
                s.truncate_draft(pos0 + 1)  # drop the chain; entry pos0 (id_last) stays
        t1 = time.perf_counter()

        s.phase("verify", self.cancel)
        hv = s.decode_target([id_last, *drafts], logits=LOGITS_ALL, hidden=True)
        assert hv is not None
        self.stats.target_forwards += 1
        if self.p.sampling.greedy:
            targets = s.target.argmax_rows(k + 1)
            a = 0
            while a < k and drafts[a] == targets[a]:
                a += 1
            nxt = targets[a]
        elif not sampled_draft:
            a, nxt = self._accept_sampled(pos0, drafts)
        else:
            a, nxt = self._accept_rejection(pos0, drafts, draft_q)
        t2 = time.perf_counter()
        accepted = [*drafts[:a], nxt]
        try:
            s.phase("commit", self.cancel)
        except Cancelled:
            self._settle(pos0, 0, accepted, hv)
            raise
        emitted, stop = self._push(accepted)
        kept = min(emitted, a)  # drafted tokens that stay in the target context
        self._settle(pos0, kept, accepted, hv)
        t3 = time.perf_counter()
        r = RoundStats(
            index=index,
            depth=k,
            drafted=k,
            accepted=a,
            emitted=emitted,
            draft_ms=((t1 - t0) + (t3 - t2)) * 1000,
            verify_ms=(t2 - t1) * 1000,
            t=t3 - self.t_gen,
            drafts=tuple(drafts),
            sync_rows=sync_rows,
            sync_ms=sync_ms,
        )
        self._round(r)
        policy.observe(r)
        return stop

    def _accept_sampled(self, pos0: int, drafts: list[int]) -> tuple[int, int]:
        """Argmax drafts, sampled target: sample the token at each verified position (the
        same draw plain sampling makes there) and keep the draft while they agree. This
        accepts draft d with probability p(d) and otherwise draws from p without d: the
        target distribution exactly (Leviathan et al. with a one-hot proposal)."""
        rows = self.s.target
        a = 0
        while True:
            t = self.sampler.sample(rows.logits(a), pos0 + 1 + a)
            if a < len(drafts) and drafts[a] == t:
                a += 1
                continue
            return a, t

    def _accept_rejection(self, pos0: int, drafts: list[int], draft_q: list[np.ndarray]) -> tuple[int, int]:
        """Sampled drafts: accept draft d (drawn from the head's distribution q) with
        probability min(1, p(d) / q(d)); at the first rejection draw from the residual
        max(0, p - q), normalised; after K acceptances draw the next token from p.
        Both p and q are the truncated, renormalised distributions plain sampling uses."""
        rows = self.s.target
        for a, d in enumerate(drafts):
            pos = pos0 + 1 + a
            p = self.sampler.dense(rows.logits(a))
            q = draft_q[a]
            if q[d] > 0 and self.sampler.uniform(pos, ACCEPT) * q[d] < p[d]:
                continue
            residual = np.maximum(p - q, 0.0)
            total = residual.sum()
            return a, self.sampler.sample_dense(residual / total if total > 0 else p, pos, RESIDUAL)
        k = len(drafts)
        return k, self.sampler.sample(rows.logits(k), pos0 + 1 + k)

    def _settle(self, pos0: int, kept: int, accepted: list[int], hv: np.ndarray) -> None:
        """After a verify: keep ``id_last`` and the first ``kept`` drafts in the target,
        roll back the rest, and queue the MTP entries of the kept tokens plus the next
        token (``accepted[kept]``), each paired with the target's hidden state."""
        s = self.s
        s.truncate_target(pos0 + 1 + kept, hidden=True)
        s.last_hidden = hv[kept]
        s.lag.extend(accepted[: kept + 1], hv[: kept + 1])
