"""Drafts from the conversation itself: the continuation of the longest earlier match.

Agents' outputs copy their inputs (code edits rewrite a file the prompt holds, summaries
quote tool results, JSON echoes records) and small models fall into loops. When the
newest tokens occurred before — in the prompt, the output so far, or an earlier output of
the same model — what followed them then is a draft that costs no model call at all
(vLLM's suffix decoding, llama.cpp's n-gram lookup).

:class:`SuffixIndex` keeps, for n-grams of a few lengths, where each last ended, over
every token it was given: :meth:`SuffixIndex.propose` is what followed the longest match
of its own newest tokens, :meth:`SuffixIndex.lookup` what followed another sequence's.
:class:`OutputStore` is a loaded model's recent outputs, bounded. :class:`SuffixOrMtp`
is a draft source (:mod:`engine.runtime.decode.propose`) that each round takes the MTP
chain, the suffix draft, the chain extended by a match its last tokens start, or a suffix
draft whose match ended extended by the head's chain — whichever expects the most tokens
per millisecond: suffix acceptance is learned per match length, verify costs are measured
here by the rows of each verify's decode, the chain's expected tokens and costs are the
depth policy's. Without an MTP head it is the suffix draft or none. Output never changes:
every draft is verified (docs/agent-speed.md).
"""

from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np

from engine.runtime.decode.cache.snapshotcache import SnapshotCache
from engine.runtime.decode.entries import Choose
from engine.runtime.decode.policy.adaptive import expected_tokens
from engine.runtime.decode.policy.costs import DEFAULT_SLOPE, RoundCosts, Window
from engine.runtime.decode.prefill import Prefill, prefill
from engine.runtime.decode.propose import MtpDraft, Proposal
from engine.runtime.decode.session import Session
from engine.runtime.decode.stats import RoundStats

#: n-gram lengths matched, longest first; the shortest is the shortest match worth a draft
LENGTHS = (16, 8, 4, 3)
MIN_MATCH = LENGTHS[-1]
#: most tokens one suffix draft proposes (the verify's logit rows cut it further:
#: engine.gguf.memory.logit_rows)
MAX_DRAFT = 64
#: acceptance prior per token of a suffix draft, by match length (16 or 8, 4, 3: a long
#: match is likely to go on), its weight in observations, and the decay of observations
PRIORS, PRIOR_N, DECAY = (0.9, 0.7, 0.5), 2.0, 0.97
#: the MTP chain's acceptance prior, for a fixed depth (which has no estimates of its own)
MTP_PRIOR = 0.7
#: tokens of recent outputs a loaded model keeps for drafting (:class:`OutputStore`)
STORE_TOKENS = 32768
#: between two stored outputs: no n-gram spans it and no draft runs past it
_SEP = -1
#: tokens given at once past which they are indexed in bulk (a prompt, a stored output)
_BULK = 64


class SuffixIndex:
    """Where each n-gram of :data:`LENGTHS` last ended, over the tokens seen so far."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in LENGTHS}
        #: (end of the earlier occurrence, length) of the longest match ending at the newest token
        self._match: tuple[int, int] | None = None

    def extend(self, tokens: list[int]) -> None:
        toks = self.tokens
        new = [int(t) for t in tokens]
        if len(new) > _BULK:  # a prompt: index all but its last token at once (no match is read there)
            start = len(toks)
            toks.extend(new[:-1])
            for n in LENGTHS:  # ascending: a later occurrence overwrites an earlier one
                self._ends[n].update((tuple(toks[i + 1 - n : i + 1]), i) for i in range(max(start, n - 1), len(toks)))
            new = new[-1:]
        for t in new:
            toks.append(t)
            i = len(toks) - 1
            match = None
            for n in LENGTHS:
                if i + 1 < n:
                    continue
                key = tuple(toks[i + 1 - n :])
                ends = self._ends[n]
                if match is None and key in ends:
                    match = (ends[key], n)
                ends[key] = i
            self._match = match

    def propose(self, k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the longest earlier match of the newest
        tokens, and the match's length (0: no draft)."""
        m = self._match
        if m is None or k < 1:
            return [], 0
        return self._after(*m, k, periodic=True)

    def lookup(self, tail: list[int], k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the longest n-gram ending ``tail`` anywhere in
        this index (another sequence's newest tokens), and that n-gram's length."""
        if k < 1:
            return [], 0
        for n in LENGTHS:
            if len(tail) >= n:
                end = self._ends[n].get(tuple(tail[-n:]))
                if end is not None:
                    tokens, _ = self._after(end, n, k)
                    if tokens:
                        return tokens, n
        return [], 0

    def _after(self, end: int, n: int, k: int, *, periodic: bool = False) -> tuple[list[int], int]:
        toks = self.tokens
        out = toks[end + 1 : min(end + 1 + k, len(toks))]
        if _SEP in out:
            out = out[: out.index(_SEP)]
        elif periodic and out and len(out) < k and end + 1 + len(out) == len(toks):
            # the continuation runs into the newest tokens: the text repeats with this
            # period, so the draft goes on repeating it (what chaining an n-gram lookup
            # through its own draft gives), as far as ``k``
            period = out[:]
            while len(out) < k:
                out.extend(period[: k - len(out)])
        return out, n if out else 0


class SuffixLearned:
    """What the suffix choice learns, kept per loaded model (with its :class:`OutputStore`)
    so each request starts from what the ones before measured: acceptance per match-length
    bucket, the MTP chain's for a fixed depth, verify times by rows, an MTP chain's draft
    time. (Several sequences may update it at once: each update is one float or one
    window sample, and a lost one only delays learning.)"""

    def __init__(self) -> None:
        self.acc = [0.0, 0.0, 0.0]  # decayed accepted / reached tokens per match-length bucket
        self.reach = [0.0, 0.0, 0.0]
        self.mtp_acc = self.mtp_reach = 0.0  # the MTP chain's, for a fixed depth
        #: verify times by rows and an MTP chain's draft time, measured on every round:
        #: what a fixed depth, plain decoding or the widest verifies cost
        self.costs = RoundCosts(MAX_DRAFT)
        self.draft_ms = Window()


class OutputStore:
    """A loaded model's recent outputs, for drafting in later requests: the next turn of
    an agent often repeats what an earlier answer (or another client's) wrote. Bounded
    to :data:`STORE_TOKENS`: the oldest outputs go first. Output never changes by what
    is stored (every draft is verified); only which drafts are tried does.

    Several sequences draft from it at once (slots): :meth:`add` takes a lock and, when
    the bound drops outputs, builds a new index and swaps it in, so a reader never sees
    one half-built."""

    def __init__(self, limit: int = STORE_TOKENS):
        self.limit = limit
        self._outputs: deque[list[int]] = deque()
        self._index = SuffixIndex()
        self._lock = threading.Lock()
        self.learned = SuffixLearned()

    @property
    def tokens(self) -> int:
        """Tokens held (separators not counted)."""
        return sum(len(o) for o in self._outputs)

    def add(self, tokens: list[int]) -> None:
        out = [int(t) for t in tokens[-self.limit :]]
        if len(out) < MIN_MATCH + 1:
            return
        with self._lock:
            self._outputs.append(out)
            held = self.tokens
            if held <= self.limit:
                self._index.extend([_SEP, *out])
                return
            while held > self.limit:
                held -= len(self._outputs.popleft())
            index = SuffixIndex()
            for o in self._outputs:
                index.extend([_SEP, *o])
            self._index = index

    def lookup(self, tail: list[int], k: int) -> tuple[list[int], int]:
        return self._index.lookup(tail, k)


class _NoMtp:
    """The depth policy beside suffix drafts without an MTP head: never an MTP chain."""

    learns = False
    max_depth = 0
    idle = False

    def next_depth(self) -> int:
        return 0

    def observe(self, r: RoundStats) -> None:
        pass


NO_MTP = _NoMtp()


def _bucket(n: int) -> int:
    return 0 if n >= 8 else 1 if n >= 4 else 2


class SuffixOrMtp:
    """A draft source: the suffix draft or the MTP chain, each round whichever pays more.

    Without an MTP head (``mtp`` None: a model that has none, or a request with MTP off)
    it is the suffix draft or no draft at all, against plain decoding's cost."""

    def __init__(self, mtp: MtpDraft | None, policy, store: OutputStore | None = None, *,
                 session: Session | None = None):  # fmt: skip
        assert mtp is not None or session is not None
        self.mtp = mtp
        self.s = mtp.s if mtp is not None else session
        self.policy = policy
        #: auto, whose estimates (acceptance by position, round costs) the choice reads where
        #: it runs; None: a fixed depth or no head, whose costs this source measures itself
        self._auto = policy if hasattr(policy, "acceptances") and hasattr(policy, "costs") else None
        self.index = SuffixIndex()
        #: the model's recent outputs: drafts where the conversation itself has no match
        self.store = store
        #: what the choice has learned: the model's, kept with its store across requests
        self.learned = store.learned if store is not None else SuffixLearned()
        self._last: tuple[int, int] | None = None  # (bucket, drafted) of the last suffix round
        self._mtp_k = 0  # drafts of the last MTP round
        self._prev_rows: int | None = None  # rows the last round's verify decode carried
        #: other sequences' rows in the last verify's step (slots; 0 alone): the next step's
        #: likely company, so a width is priced as the step it makes
        self._others = 0
        #: where this round's drafts come from (the round's statistics read it)
        self.source = "mtp"
        #: the verify returns hidden rows only for an MTP head to read
        self.needs_hidden = mtp is not None
        #: how deep llama.cpp rolls the target back in place (a recurrent model's
        #: ``n_rs_seq``); None: any depth (attention only)
        target = getattr(self.s, "target", None)
        self.rollback = target.n_rs_seq if target is not None and target.model.is_recurrent else None

    # --------------------------------------------------------------- protocol
    def begin(self, prompt: list[int], *, cancel, choose_first: Choose | None, idle: bool, points=(),
              cache: SnapshotCache | None = None) -> Prefill:  # fmt: skip
        if self.mtp is not None:
            pf = self.mtp.begin(prompt, cancel=cancel, choose_first=choose_first, idle=idle, points=points, cache=cache)
        else:
            pf = prefill(self.s, prompt, speculative=False, cancel=cancel, choose_first=choose_first, points=points,
                         cache=cache)  # fmt: skip
        self.index.extend([*prompt, pf.first_token])
        return pf

    def draft(self, id_last: int, pos0: int, k: int, room: int | None = None) -> Proposal:
        """The suffix draft (at most ``room`` tokens: the verify's limit this round), cut
        to the width that expects most tokens per millisecond, when that beats the MTP
        chain of depth ``k`` (the policy's choice), else the chain."""
        width = min(MAX_DRAFT, room if room is not None else k)
        tokens, n = self.index.propose(width)
        if self.store is not None and n < LENGTHS[0]:  # a longer match in earlier outputs wins
            stored, m = self.store.lookup(self.index.tokens[-LENGTHS[0] :], width)
            if m > n:
                tokens, n = stored, m
        take = self.suffix_width(len(tokens), _bucket(n), k) if tokens else 0
        if take:
            self.source, self._mtp_k = "suffix", 0
            self._last = (_bucket(n), take)
            # the match ended (an earlier output's end, the index's) before the verify's limit:
            # the head's chain may go on from where it stopped
            tail = 0
            if take == len(tokens) < width and self.mtp is not None and self.mtp.follows:
                tail = self.tail_width(take, _bucket(n), width - take)
            if tail:
                self.source = "suffix+mtp"
                return self.mtp.draft_after(id_last, pos0, list(tokens), tail)
            return Proposal(list(tokens[:take]))
        self.source, self._last = "mtp", None
        proposal = self.mtp.draft(id_last, pos0, k) if self.mtp is not None and k > 0 else Proposal()
        self._mtp_k = len(proposal.tokens)
        if proposal.tokens and proposal.q is None and width > len(proposal.tokens):
            self._extend(proposal, k, width)
        return proposal

    def _extend(self, proposal: Proposal, k: int, width: int) -> None:
        """Where the chain's last tokens start an earlier match (after an edit, the copy goes
        on a few tokens later), append what followed it, as far as that pays."""
        m = self._mtp_k
        tokens, n = self.index.lookup([*self.index.tokens[-LENGTHS[0] :], *proposal.tokens], width - m)
        if not tokens:
            return
        take = self.extension_width(len(tokens), _bucket(n), m)
        if take:
            proposal.tokens.extend(tokens[:take])
            proposal.extended = take
            self.source = "mtp+suffix"
            self._last = (_bucket(n), take)

    def accept(self, tokens: list[int], hidden: np.ndarray | None) -> None:
        kept = len(tokens) - 1  # the drafts kept (the last token is the target's own)
        if self.source != "suffix" and self._mtp_k:
            self.learned.mtp_acc = self.learned.mtp_acc * DECAY + min(kept, self._mtp_k)
            self.learned.mtp_reach = self.learned.mtp_reach * DECAY + min(kept + 1, self._mtp_k)
        if self._last is not None:
            b, drafted = self._last
            start = self._mtp_k if self.source == "mtp+suffix" else 0  # the suffix tokens' first
            if kept >= start:  # reached
                self.learned.acc[b] = self.learned.acc[b] * DECAY + min(kept - start, drafted)
                self.learned.reach[b] = self.learned.reach[b] * DECAY + min(kept - start + 1, drafted)
        if self.mtp is not None:
            assert hidden is not None
            self.mtp.accept(tokens, hidden)
        self.index.extend(tokens)

    def observe(self, r: RoundStats) -> None:
        """A round's costs (every round, whichever source drafted it)."""
        if r.forced:
            return
        # verify times are kept by the rows of the whole decode: alone, the round's own; in
        # slots, the step's, every sequence's (a sequence's verify lasts its step)
        own = r.drafted + 1
        rows = max(r.step_rows, own)
        if rows == self._prev_rows:  # a decode of a new size pays llama.cpp's graph set-up
            self.learned.costs.add_verify(rows, r.verify_ms)
        self._prev_rows = rows
        self._others = rows - own
        if r.source == "mtp" and r.drafted:
            self.learned.draft_ms.add(r.draft_ms)

    # ----------------------------------------------------------------- choice
    def acceptance(self, bucket: int) -> float:
        return (self.learned.acc[bucket] + PRIORS[bucket] * PRIOR_N) / (self.learned.reach[bucket] + PRIOR_N)

    def _cost_model(self):
        """Where verify times come from: every round's verify measured here (suffix rounds
        teach auto nothing, so its own estimates never see the widest verifies); auto's
        estimates until this source has measured one."""
        return self.learned.costs if self.learned.costs.verify or self._auto is None else self._auto.costs

    def verify_ms(self, rows: int) -> float:
        """A verify of ``rows`` rows of this sequence's, in a step with the others' as last time."""
        return self._cost_model().verify_ms(self._others + rows)

    def _verify_table(self, n: int) -> list[float]:
        """:meth:`verify_ms` of 0..``n`` rows (index 0 unused)."""
        full = self._cost_model().verify_table(self._others + n)
        return [0.0, *full[self._others + 1 :]]

    def _replays(self, ps: list[float], v: list[float]) -> list[float]:
        """Expected replay time of a verify of the first ``w`` drafts, for w in 0..len(ps)
        (``ps``: each draft's chance of being kept once reached; ``v``: verify ms by rows).
        On a recurrent model a rejection more than ``n_rs_seq`` drafts deep is rolled back
        by decoding the kept tokens again from a checkpoint (:meth:`Session.checkpoint`):
        a verify of their rows. Nothing elsewhere."""
        n = self.rollback
        out = [0.0] * (len(ps) + 1)
        if n is None or len(ps) <= n:
            return out
        acc, reach = 0.0, 1.0  # acc: replays of kept counts below w - n
        for w in range(n + 1, len(ps) + 1):
            j = w - n - 1  # the deepest kept count whose rejection reaches past the rollback
            acc += reach * (1 - ps[j]) * v[j + 1]
            reach *= ps[j]
            out[w] = acc
        return out

    def mtp_rate(self, k: int) -> float:
        """Expected tokens per ms of this round without the suffix draft: the MTP chain of
        depth ``k``, or plain decoding at 0 (without a head the policy's depth is always 0)."""
        _, e, _, cost = self._chain(k)
        return e / cost

    def _chain(self, k: int) -> tuple[list[float], float, float, float]:
        """An MTP chain of ``k`` drafts (0: a plain round): each draft's acceptance, the
        expected tokens, the chance all ``k`` are kept, and the round's cost in ms — auto's
        estimates where it runs (its :meth:`~AdaptiveDepth.rates` divide the same two),
        else this source's own."""
        if self._auto is not None:
            ps = list(self._auto.acceptances()[:k])
            cost = self._auto.costs.round_ms(k)
        else:
            L = self.learned
            ps = [self._fixed_acceptance()] * k
            cost = self.verify_ms(k + 1)
            if k:
                cost += L.draft_ms.median if L.draft_ms else DEFAULT_SLOPE * k * self.verify_ms(1)
        return ps, expected_tokens(ps)[-1], math.prod(ps), max(cost, 1e-6)

    def extension_width(self, width: int, bucket: int, k: int) -> int:
        """How many of ``width`` suffix tokens to append after an MTP chain of ``k``: the
        count with the most expected tokens per ms (they count only if the whole chain is
        kept; they cost the wider verify and its replays), when that beats the chain alone;
        0: none."""
        ps, e_k, all_kept, cost = self._chain(k)
        v = self._verify_table(k + 1 + width)
        p = self.acceptance(bucket)
        replays = self._replays(ps + [p] * width, v)
        best, best_rate = 0, e_k / cost
        gain, reach = 0.0, all_kept
        for w in range(1, width + 1):
            reach *= p
            gain += reach
            rate = (e_k + gain) / max(cost + v[k + 1 + w] - v[k + 1] + replays[k + w] - replays[k], 1e-6)
            if rate > best_rate:
                best, best_rate = w, rate
        return best

    def tail_width(self, width: int, bucket: int, room: int) -> int:
        """How many of the head's drafts to append after ``width`` suffix tokens whose match
        ended (at most ``room``): the count with the most expected tokens per ms, when that
        beats the suffix draft alone; 0: none. They count only if every suffix token is
        kept; they cost the head a step per suffix token and per draft but the last, the
        wider verify and its replays. The head's chain after ``width`` tokens it did not
        draft is taken to be as good as its own chain that deep."""
        p = self.acceptance(bucket)
        heads = self._head_acceptances()
        ps = [p] * width + [heads[min(width + i, len(heads) - 1)] for i in range(room)]
        v = self._verify_table(width + 1 + room)
        replays = self._replays(ps, v)
        e = sum(p**j for j in range(width + 1))
        sync, step = self._head_ms()
        best, best_rate = 0, e / max(v[width + 1] + replays[width], 1e-6)
        reach, gain = p**width, 0.0
        for i in range(1, room + 1):
            reach *= ps[width + i - 1]
            gain += reach
            cost = v[width + 1 + i] + replays[width + i] + sync + (width + i - 1) * step
            rate = (e + gain) / max(cost, 1e-6)
            if rate > best_rate:
                best, best_rate = i, rate
        return best

    def _fixed_acceptance(self) -> float:
        """The head's acceptance per draft as learned here (a fixed depth: no auto estimates)."""
        L = self.learned
        return (L.mtp_acc + MTP_PRIOR * PRIOR_N) / (L.mtp_reach + PRIOR_N)

    def _head_acceptances(self) -> list[float]:
        """The head's acceptance by chain position: auto's estimates, else one learned rate."""
        if self._auto is not None:
            return list(self._auto.acceptances()) or [MTP_PRIOR]
        return [self._fixed_acceptance()]

    def _head_ms(self) -> tuple[float, float]:
        """The head's catch-up (which yields its first draft) and one chained step, in ms:
        auto's measured parts, else a fixed depth's chain time shared out by its drafts."""
        if self._auto is not None:
            return self._auto.costs.sync_ms(), self._auto.costs.step_ms()
        L = self.learned
        one = L.draft_ms.median / max(1, self.policy.max_depth) if L.draft_ms else DEFAULT_SLOPE * self.verify_ms(1)
        return one, one

    def suffix_width(self, width: int, bucket: int, k: int) -> int:
        """How many of ``width`` suffix tokens to draft: the count with the most expected
        tokens per ms (a verify of its rows and, on a recurrent model, its replays), when
        that beats :meth:`mtp_rate`; 0: the suffix draft does not pay."""
        p = self.acceptance(bucket)
        v = self._verify_table(width + 1)
        replays = self._replays([p] * width, v)
        best, best_rate = 0, self.mtp_rate(k)
        e, reach = 1.0, 1.0
        for w in range(1, width + 1):
            reach *= p
            e += reach
            rate = e / max(v[w + 1] + replays[w], 1e-6)
            if rate > best_rate:
                best, best_rate = w, rate
        return best
