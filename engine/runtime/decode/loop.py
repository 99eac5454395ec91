"""Generating after a prompt over a :class:`Session`: plain, or speculating with MTP.

A speculative round is propose → verify → settle (draft depth K): the draft source
(:mod:`engine.runtime.decode.drafting.propose`, the MTP head) proposes d1..dK from the target's
hidden states; the target verifies ``[id_last, d1..dK]`` in one batch; the acceptance
rule (:mod:`engine.runtime.decode.accept`) keeps a prefix of a drafts and the target's
own next token ``t_a``; settling rolls the target back to what was kept and tells the
draft source, whose context catches up on the kept tokens with the target's own hidden
states. Greedy output is exactly what plain greedy decoding emits: every emitted token
is the target's argmax given the tokens before it (bit for bit where the kernels are
batch-invariant: exact mode; see docs/mtp.md, "Speculation and identity").

Cancellation is checked at every phase boundary (prefill chunks, each draft step,
before verify, before commit); whatever the phase, the contexts end holding exactly
the emitted tokens, so the next turn of the conversation continues correctly.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from engine.errors import Cancelled
from engine.runtime.decode.accept import accept
from engine.runtime.decode.depth import Mtp
from engine.runtime.decode.emitter import Emitter, EmitFn, RoundFn, Splitter
from engine.runtime.decode.logprobs import TokenLogprob, token_logprob
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.penalties import PenalizedRows
from engine.runtime.decode.drafting.drafts import Drafts
from engine.runtime.decode.policy.base import NO_HEAD
from engine.runtime.decode.policy.planner import MTP, Plan, RoundPlanner, SuffixLearned
from engine.runtime.decode.prefill import prefill
from engine.runtime.decode.drafting.propose import MtpDraft
from engine.runtime.decode.sampling import Sampler
from engine.runtime.decode.session import Session
from engine.runtime.decode.cache.snapshotcache import SnapshotCache
from engine.runtime.decode.stats import GenerationStats, RoundStats
from engine.runtime.decode.stopping import Pushed, StopChecker, StopReason
from engine.runtime.decode.drafting.suffix import OutputStore, SuffixDraft
from engine.runtime.llama.batch import LOGITS_ALL, LOGITS_LAST


@dataclass
class Decoded:
    """What one sequence's decode loop produced: its tokens and text, its statistics and
    logprobs. (The job's result, with what the engine adds, is jobs.GenerateResult.)"""

    tokens: list[int]
    text: str
    stats: GenerationStats
    #: per emitted token, when asked (:class:`TokenLogprob`)
    logprobs: list[TokenLogprob] | None = None

    @property
    def stop_reason(self) -> StopReason | None:
        return self.stats.stop_reason


def generate(
    session: Session,
    prompt: list[int],
    params: DecodeParams,
    *,
    cancel: threading.Event | None = None,
    on_emit: EmitFn | None = None,
    on_round: RoundFn | None = None,
    cache: SnapshotCache | None = None,
    splitter: Splitter | None = None,
    outputs: OutputStore | None = None,
) -> Decoded:
    """Generate after ``prompt``. Speculation is used when ``params.depth`` is set and
    the session has an MTP context, greedy or sampling. With a prompt ``cache`` (the
    loaded model's), the prefill resumes from and saves snapshots of prompt prefixes.
    With a ``splitter`` (a chat reply's parser) every emitted piece is split by it, its
    parts go to ``on_emit`` with the text, and the tokens and rounds of the reply's think
    block are counted as thinking (:mod:`engine.runtime.decode.emitter`). With an
    ``outputs`` store (the loaded model's), suffix drafts also come from earlier outputs,
    and this one's tokens are added to it."""
    model = session.target.model
    policy = params.depth if session.draft is not None else None
    greedy = params.sampling.greedy
    stats = GenerationStats(
        mtp=Mtp.ON if policy is not None else Mtp.OFF,
        draft_depth=policy.draft_depth if policy is not None else None,
        prompt_tokens=len(prompt),
        sampled=not greedy,
        sampled_draft=policy is not None and not greedy and params.sampled_draft,
    )
    is_end = model.is_eog
    if params.end_tokens:
        ends = params.end_tokens
        is_end = lambda t: t in ends or model.is_eog(t)  # noqa: E731
    # under a grammar, the grammar decides where the output may end
    ignore_eog = params.ignore_eog and params.constraint is None
    piece = model.piece
    if params.shown_tokens:
        shown = {t: model.token_text(t).encode("utf-8") for t in params.shown_tokens}
        piece = lambda t: shown.get(t) or model.piece(t)  # noqa: E731
    checker = StopChecker(piece, is_end, max_tokens=params.max_tokens, stop=params.stop, ignore_eog=ignore_eog)
    repairs0, replays0 = session.repairs, session.replays
    t0 = time.perf_counter()
    run = _Run(session, params, checker, stats, cancel, Emitter(on_emit, splitter, piece), on_round)
    if not greedy:
        stats.seed = run.sampler.seed
    planner: RoundPlanner | None = None
    drafts: Drafts | None = None
    if policy is not None or params.suffix_drafts:
        mtp = MtpDraft(session, run.sampler if stats.sampled_draft else None, cancel) if policy is not None else None
        # suffix drafts are argmax-style: no distribution to sample a sampled draft's rejection by
        suffix = SuffixDraft(outputs) if params.suffix_drafts and not stats.sampled_draft else None
        if mtp is not None or suffix is not None:
            learned = (outputs.learned if outputs is not None else SuffixLearned()) if suffix is not None else None
            target = session.target
            planner = RoundPlanner(
                policy if policy is not None else NO_HEAD,
                learned,
                head=mtp is not None,
                follows=mtp is not None and mtp.follows,
                rollback=target.n_rs_seq if target.model.is_recurrent else None,
            )
            drafts = Drafts(session, mtp, suffix)
    c = params.constraint
    if c is not None:
        first = lambda logits: c.choose(logits, len(prompt), run.sampler.sample)  # noqa: E731
    else:
        first = None if greedy else (lambda logits: run.sampler.sample(logits, len(prompt)))
    try:
        if drafts is not None:
            assert planner is not None
            pf = drafts.begin(
                prompt,
                cancel=cancel,
                choose_first=first,
                idle=planner.idle,
                points=params.cache_points,
                cache=cache,
                media=params.media,
            )
        else:
            pf = prefill(
                session,
                prompt,
                speculative=False,
                cancel=cancel,
                choose_first=first,
                points=params.cache_points,
                cache=cache,
                media=params.media,
            )
    except Cancelled:
        stats.stop_reason = StopReason.CANCELLED
        stats.prompt_ms = (time.perf_counter() - t0) * 1000
        return Decoded([], "", stats)
    stats.prompt_tokens_reused = pf.reused
    stats.prompt_tokens_restored = pf.restored
    run.t_gen = time.perf_counter()
    stats.prompt_ms = (run.t_gen - t0) * 1000
    if params.max_tokens <= 0:
        stats.stop_reason = StopReason.MAX_TOKENS
    elif drafts is not None:
        assert planner is not None
        run.note_lp(pf.logits, pf.first_token)
        run.speculative(pf.first_token, planner, drafts)
    else:
        run.note_lp(pf.logits, pf.first_token)
        run.plain(pf.first_token)
    stats.generation_ms = (time.perf_counter() - run.t_gen) * 1000
    stats.rollback_repairs = session.repairs - repairs0
    stats.rollback_replays = session.replays - replays0
    stats.thinking_tokens = run.out.thinking_tokens
    stats.generated = len(checker.tokens)
    stats.stop_reason = checker.stop_reason or stats.stop_reason
    if c is not None:
        stats.forced = c.forced_count
    lps = run.emitted_lps if params.logprobs is not None else None
    if outputs is not None:
        outputs.add(checker.tokens)
    return Decoded(list(checker.tokens), checker.text, stats, lps)


class _Run:
    """One generation's loops (state shared by the plain and speculative paths)."""

    def __init__(self, session, params, checker, stats, cancel, out: Emitter, on_round: RoundFn | None):
        self.s: Session = session
        self.p: DecodeParams = params
        self.checker: StopChecker = checker
        self.stats: GenerationStats = stats
        self.cancel = cancel
        self.out = out
        self.on_round = on_round
        self.sampler = Sampler(params.sampling)
        self.t_gen = 0.0
        #: penalties, when any applies; then the generated tokens so far, by count
        self.penalties = params.penalties if params.penalties.active else None
        self.counts: Counter = Counter()
        #: log-probabilities of tokens chosen but not pushed yet, and of those emitted
        self.pending_lps: list[TokenLogprob] = []
        self.emitted_lps: list[TokenLogprob] = []

    def note_lp(self, row: np.ndarray | None, token: int) -> None:
        """Record the log-probability of ``token`` chosen from ``row`` (None: forced)."""
        if self.p.logprobs is not None:
            piece = self.s.target.model.piece
            lp = (
                TokenLogprob(token, piece(token), 0.0)
                if row is None
                else token_logprob(row, token, self.p.logprobs, piece)
            )
            self.pending_lps.append(lp)

    def penalized(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` penalised by the output so far (the row itself when no penalty)."""
        return self.penalties.apply(logits, self.counts) if self.penalties is not None else logits

    def _finish(self, reason: StopReason) -> None:
        self.out.emit([], self.checker.finish(reason))

    def _round(self, r: RoundStats) -> None:
        if self.out.thinking:
            r = replace(r, thinking=True)
        self.stats.record(r)
        if self.on_round is not None:
            self.on_round(r)

    def _push(self, tokens: list[int]) -> tuple[int, StopReason | None]:
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
        if self.penalties is not None:
            self.counts.update(out)
        lps = None
        if self.p.logprobs is not None:
            lps = self.pending_lps[: len(out)]
            del self.pending_lps[: len(tokens)]
            self.emitted_lps.extend(lps)
        self.out.emit(out, "".join(text), lps)
        return len(out), stop

    # ------------------------------------------------------------------ plain
    def plain(self, tok: int) -> None:
        s = self.s
        c = self.p.constraint
        n_ctx = s.n_ctx
        index = 0
        while True:
            _, stop = self._push([tok])
            if stop:
                return
            if len(s.target_tokens) + 1 >= n_ctx:
                self._finish(StopReason.CONTEXT_FULL)
                return
            forced: list[int] = []
            if c is not None:  # tokens the grammar forces ride along in the same forward
                room = min(
                    self.checker.max_tokens - len(self.checker.tokens),
                    s.target.n_batch - 1,
                    n_ctx - 2 - len(s.target_tokens),
                )
                forced = c.take_forced(max(room, 0))
                for t in forced:
                    self.note_lp(None, t)
                if forced:
                    _, stop = self._push(forced)
                    if stop:
                        return
            try:
                s.phase("decode", self.cancel)
            except Cancelled:
                self._finish(StopReason.CANCELLED)
                return
            t = time.perf_counter()
            s.decode_target([tok, *forced], logits=LOGITS_LAST, hidden=False)
            raw = s.target.logits(-1)
            logits = self.penalized(raw)
            pos = len(s.target_tokens)
            tok = c.choose(logits, pos, self.sampler.sample) if c is not None else self.sampler.sample(logits, pos)
            self.note_lp(raw, tok)
            now = time.perf_counter()
            self.stats.target_forwards += 1
            self._round(
                RoundStats(
                    index=index,
                    depth=0,
                    drafted=0,
                    accepted=0,
                    emitted=1 + len(forced),
                    draft_settle_ms=0.0,
                    verify_ms=(now - t) * 1000,
                    t=now - self.t_gen,
                    forced=len(forced),
                )
            )
            index += 1

    # ------------------------------------------------------------ speculative
    def speculative(self, id_last: int, planner: RoundPlanner, sources: Drafts) -> None:
        s = self.s
        n_ctx = s.n_ctx
        _, stop = self._push([id_last])
        index = 0
        while stop is None:
            pos0 = len(s.target_tokens)  # position of id_last (emitted, not yet decoded)
            if pos0 + 1 >= n_ctx:
                self._finish(StopReason.CONTEXT_FULL)
                break
            try:
                stop, id_last = self._spec_round(index, id_last, pos0, planner, sources)
            except Cancelled:
                self._finish(StopReason.CANCELLED)
                stop = StopReason.CANCELLED
            index += 1
        # Entries still in the lag are fed by the next prefill if it needs them.

    def _spec_round(
        self, index: int, id_last: int, pos0: int, planner: RoundPlanner, sources: Drafts
    ) -> tuple[StopReason | None, int]:
        """One round, planned (:mod:`engine.runtime.decode.policy.planner`), proposed,
        verified and settled; returns the stop reason (None: go on) and the next ``id_last``."""
        s = self.s
        c = self.p.constraint
        remaining = self.checker.max_tokens - len(self.checker.tokens)
        # the verify batch may fill the context up to n_ctx - 1 tokens, as plain decoding does
        room = max(0, min(remaining - 1, s.n_ctx - 2 - pos0, s.target.n_batch - 1))
        rows = min(room, s.target.n_outputs - 1)  # ... and read at most the logit rows the context has
        k = planner.depth(room)
        t0 = time.perf_counter()
        # a forced run is verified in one batch: the grammar's forced tokens are the draft
        forced = c.forced_run(rows) if c is not None else []
        plan = planner.plan(k, rows, forced, sources.match)
        proposal = sources.propose(plan, planner, id_last, pos0, rows)  # propose
        if c is not None and proposal.tokens and not forced:  # only what the grammar allows is worth verifying
            n = c.valid_prefix(proposal.tokens)
            proposal.extended = max(0, proposal.extended - (len(proposal.tokens) - n))
            del proposal.tokens[n:]
            if proposal.q is not None:
                del proposal.q[n:]
        drafts = proposal.tokens
        t1 = time.perf_counter()

        s.phase("verify", self.cancel)  # verify
        s.checkpoint(len(drafts))
        hv = s.decode_target([id_last, *drafts], logits=LOGITS_ALL, hidden=sources.needs_hidden)
        step_rows = s.target.step_rows
        self.stats.target_forwards += 1
        rows = s.target if self.penalties is None else PenalizedRows(s.target, self.penalties, self.counts, drafts)
        a, nxt = accept(rows, drafts, self.sampler, pos0, proposal.q, c)
        if self.p.logprobs is not None:
            for i, t in enumerate([*drafts[:a], nxt]):
                self.note_lp(None if i < a and forced else s.target.logits(i), t)
        t2 = time.perf_counter()
        accepted = [*drafts[:a], nxt]
        try:
            s.phase("commit", self.cancel)
        except Cancelled:
            self._settle(sources, planner, plan, pos0, 0, accepted, hv)
            raise
        emitted, stop = self._push(accepted)
        kept = min(emitted, a)  # drafted tokens that stay in the target context
        self._settle(sources, planner, plan, pos0, kept, accepted, hv)
        t3 = time.perf_counter()
        r = RoundStats(
            drafter=MTP if forced else plan.drafter,
            index=index,
            depth=0 if forced else len(drafts),
            drafted=0 if forced else len(drafts),
            accepted=0 if forced else a,
            forced=a if forced else 0,
            emitted=emitted,
            draft_settle_ms=((t1 - t0) + (t3 - t2)) * 1000,
            verify_ms=(t2 - t1) * 1000,
            t=t3 - self.t_gen,
            drafts=tuple(drafts),
            sync_rows=proposal.sync_rows,
            sync_ms=proposal.sync_ms,
            extended=0 if forced else proposal.extended,
            step_rows=step_rows,
        )
        self._round(r)
        planner.observe(r, constrained=c is not None)
        return stop, nxt

    def _settle(
        self,
        drafts: Drafts,
        planner: RoundPlanner,
        plan: Plan,
        pos0: int,
        kept: int,
        accepted: list[int],
        hv: np.ndarray | None,
    ) -> None:
        """After a verify: keep ``id_last`` and the first ``kept`` drafts in the target,
        roll back the rest, hand the draft sources the kept tokens plus the next one
        (``accepted[kept]``), each with the target's hidden state before it, and tell the
        planner what the plan kept."""
        s = self.s
        s.truncate_target(pos0 + 1 + kept, hidden=hv is not None)
        s.last_hidden = hv[kept] if hv is not None else None
        drafts.accept(accepted[: kept + 1], hv[: kept + 1] if hv is not None else None)
        planner.kept(plan, kept)
