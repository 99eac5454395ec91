"""Speculation statistics, per round and running.

Acceptance is ``accepted / drafted`` (llama.cpp PR #14104's definition): the share of
drafted tokens the target confirmed, not the share of rounds with any acceptance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.runtime.decode.depth import DraftDepth, Mtp
from engine.runtime.decode.stopping import StopReason


@dataclass(kw_only=True, slots=True)
class RoundStats:
    """One draft/verify round (or one plain decode step, with ``depth == 0``). Never
    changed once made (``dataclasses.replace`` makes another); not frozen, as a frozen
    dataclass's fields cost 1.5 µs more to set, at every token of plain decoding."""

    index: int
    depth: int
    drafted: int
    accepted: int
    emitted: int
    #: the round's time outside its verify decode: drafting (the head's catch-up included), then
    #: accepting, committing, emitting and settling the draft sources
    draft_settle_ms: float
    verify_ms: float
    t: float  # seconds since generation start, at the end of the round
    drafts: tuple[int, ...] = ()  # the drafted tokens (tests compare draft sources)
    sync_rows: int = 0  # MTP catch-up entries fed before the first draft (part of draft_settle_ms)
    sync_ms: float = 0.0
    #: tokens a grammar forced this round: decoded in the same forward, chosen by no model
    forced: int = 0
    #: the round ended inside the reply's think block
    thinking: bool = False
    #: where the drafts came from: "mtp", "suffix", "mtp+suffix" (an MTP chain whose last
    #: tokens start an earlier match, extended by what followed it) or "suffix+mtp" (a suffix
    #: draft whose match ended, extended by the head's chain) (engine.runtime.decode.drafting.suffix)
    drafter: str = "mtp"
    #: of the drafts, the last ones the second source added (the suffix's after the chain,
    #: or the head's after the suffix draft)
    extended: int = 0
    #: rows the verify's decode carried: with slots, every sequence's in that step (0: not known)
    step_rows: int = 0

    def split(self) -> tuple[int, int, int, int]:
        """(suffix drafts, of them kept, the head's drafts, of them kept)."""
        if self.drafter == "suffix":
            return self.drafted, self.accepted, 0, 0
        if self.drafter == "suffix+mtp":
            n = self.drafted - self.extended
            return n, min(self.accepted, n), self.extended, max(0, self.accepted - n)
        head = self.drafted - self.extended  # "mtp", "mtp+suffix"
        return self.extended, max(0, self.accepted - head), head, min(self.accepted, head)

    @property
    def rejected(self) -> int:
        return self.drafted - self.accepted


@dataclass
class GenerationStats:
    """Running totals of one generation. Mutated only by the decoder."""

    mtp: Mtp = Mtp.OFF
    #: the depth asked for (None: no speculation)
    draft_depth: DraftDepth | None = None
    prompt_tokens: int = 0
    prompt_tokens_reused: int = 0
    #: of those, tokens restored from a prompt-cache snapshot
    prompt_tokens_restored: int = 0
    prompt_ms: float = 0.0
    generated: int = 0  # emitted tokens
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_settle_ms: float = 0.0
    verify_ms: float = 0.0
    target_forwards: int = 0  # target decodes after the prompt
    rollback_repairs: int = 0  # rollbacks llama.cpp refused, repaired by re-prefill
    rollback_replays: int = 0  # deep rejections undone from a checkpoint (kept tokens decoded again)
    generation_ms: float = 0.0
    stop_reason: StopReason | None = None
    drafted_at: list[int] = field(default_factory=list)  # per draft position of the MTP head's drafts
    accepted_at: list[int] = field(default_factory=list)
    accept_len_hist: list[int] = field(default_factory=list)  # rounds with head drafts, by accepted length
    sampled: bool = False  # temperature > 0
    sampled_draft: bool = False  # drafts sampled from the MTP head, rejection-sampled
    seed: int | None = None  # the seed sampling used (given or drawn), to replay it
    #: emitted tokens a grammar forced (chosen by no model; free with or without MTP)
    forced: int = 0
    #: emitted tokens inside the reply's think block, and drafts made and accepted there
    thinking_tokens: int = 0
    thinking_drafted: int = 0
    thinking_accepted: int = 0
    #: of the drafts, those from the conversation itself (engine.runtime.decode.drafting.suffix),
    #: and the rounds that drafted so
    suffix_rounds: int = 0
    suffix_drafted: int = 0
    suffix_accepted: int = 0

    @property
    def rejected(self) -> int:
        return self.drafted - self.accepted

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accept_len(self) -> float:
        """Mean accepted head drafts per round the head drafted in, not counting the target's
        own token each round adds (tokens per such round = this + 1; suffix drafts apart)."""
        spec_rounds = sum(self.accept_len_hist)
        if not spec_rounds:
            return 0.0
        return sum(i * n for i, n in enumerate(self.accept_len_hist)) / spec_rounds

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]

    @property
    def tokens_per_second(self) -> float:
        return self.generated / (self.generation_ms / 1000.0) if self.generation_ms > 0 else 0.0

    def record(self, r: RoundStats) -> None:
        self.rounds += 1
        self.draft_settle_ms += r.draft_settle_ms
        self.verify_ms += r.verify_ms
        if not r.drafted:  # a round without drafts (plain decoding's every token) adds no more
            return
        self.drafted += r.drafted
        self.accepted += r.accepted
        if r.thinking:
            self.thinking_drafted += r.drafted
            self.thinking_accepted += r.accepted
        suffix, suffix_kept, head, kept = r.split()
        if suffix:
            self.suffix_rounds += 1
            self.suffix_drafted += suffix
            self.suffix_accepted += suffix_kept
        # by draft position and per round: the MTP head's chains from the target's last token
        # (a suffix draft is not the head's, and its lengths would stretch the head's figures;
        # it has counts of its own; the head's drafts after one count in the totals only)
        if head and r.drafter != "suffix+mtp":
            _grow(self.drafted_at, head)
            _grow(self.accepted_at, head)
            _grow(self.accept_len_hist, head + 1)
            for i in range(head):
                self.drafted_at[i] += 1
            for i in range(kept):
                self.accepted_at[i] += 1
            self.accept_len_hist[kept] += 1

    def add(self, other: GenerationStats) -> None:
        """Add ``other``'s speculation counts to these (totals over generations)."""
        self.rounds += other.rounds
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.generated += other.generated
        self.draft_settle_ms += other.draft_settle_ms
        self.verify_ms += other.verify_ms
        self.generation_ms += other.generation_ms
        for mine, theirs in (
            (self.drafted_at, other.drafted_at),
            (self.accepted_at, other.accepted_at),
            (self.accept_len_hist, other.accept_len_hist),
        ):
            _grow(mine, len(theirs))
            for i, n in enumerate(theirs):
                mine[i] += n

    @property
    def depth_json(self) -> int | str:
        """The draft depth as JSON: K, "auto", or 0 without speculation."""
        return 0 if self.draft_depth is None else self.draft_depth.to_json()


def _grow(xs: list[int], n: int) -> None:
    if len(xs) < n:
        xs.extend([0] * (n - len(xs)))
