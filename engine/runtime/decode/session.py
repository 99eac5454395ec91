"""The target (and MTP) context of one loaded model and exactly which tokens they hold.

Bookkeeping invariants (engine thread only):

* ``target_tokens``: the tokens whose KV / recurrent state is in the target context, at
  positions ``0..n-1``. The last *emitted* token of a generation is not among them until
  something decodes it.
* ``last_hidden``: the target's hidden state for ``target_tokens[-1]`` when known.
* ``draft_tokens``: the MTP context holds entry ``p`` for token ``draft_tokens[p]`` paired
  with the target's hidden state of position ``p - 1``. An entry depends only on tokens
  ``0..p``, so the entries along the common prefix with a new prompt stay valid.

A rollback that llama.cpp refuses (``seq_rm`` returns False: recurrent state rolls back
only within ``n_rs_seq`` tokens of the last decode, once) is repaired by clearing the
context and re-decoding the tokens to keep; it is counted, never ignored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import Cancelled, PromptTooLongError
from engine.runtime.llama.batch import LOGITS_ALL, LOGITS_LAST, LOGITS_NONE, Batch
from engine.runtime.llama.context import Context

if TYPE_CHECKING:
    from engine.runtime.decode.prefixcache import PrefixCache

HOLE = -1  # an MTP position skipped on purpose (see Session.sync_draft)

#: picks a token from a logits row (sampling); the default everywhere is the argmax
Choose = Callable[[np.ndarray], int]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_prefix_entries(entries: list[int], tokens: list[int]) -> int:
    """Like :func:`common_prefix`, where a hole matches any token: a skipped MTP entry
    is absent from the MTP context, not wrong."""
    n = min(len(entries), len(tokens))
    i = 0
    while i < n and (entries[i] == tokens[i] or entries[i] == HOLE):
        i += 1
    return i


@dataclass
class Prefill:
    """Outcome of bringing the contexts up to a prompt."""

    reused: int  # prompt tokens already in the target context
    decoded: int  # prompt tokens decoded now
    first_token: int  # the token after the prompt (greedy, or as chosen)
    logits: np.ndarray  # copy of the last prompt row's logits (for sampling)
    restored: int = 0  # of ``reused``, tokens restored from a prompt-cache snapshot


class Session:
    def __init__(self, target: Context, draft: Context | None = None):
        self.target = target
        self.draft = draft
        self.n_embd = target.model.n_embd
        self.batch = Batch(target.n_batch)
        self.dbatch = Batch(draft.n_batch, self.n_embd) if draft is not None else None
        self.target_tokens: list[int] = []
        self.draft_tokens: list[int] = []
        self.last_hidden: np.ndarray | None = None
        self.lag = Lag()
        #: the newest entries decoded into the MTP context, for re-feeding (sync_draft's width)
        self.fed = FedTail()
        self.repairs = 0
        #: snapshots of prompt prefixes to resume from (set by whoever owns the session)
        self.cache: PrefixCache | None = None
        #: test seam: called with a phase name at every cancellation point
        self.phase_hook: Callable[[str], None] | None = None

    def close(self) -> None:
        if self.cache is not None:
            self.cache.clear()
        self.batch.close()
        if self.dbatch is not None:
            self.dbatch.close()

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    def reset(self) -> None:
        self.target.clear()
        self.target_tokens = []
        self.last_hidden = None
        self.lag.clear()
        if self.draft is not None:
            self.draft.clear()
            self.draft_tokens = []
            self.fed.clear()

    def phase(self, name: str, cancel: threading.Event | None) -> None:
        if self.phase_hook is not None:
            self.phase_hook(name)
        if cancel is not None and cancel.is_set():
            raise Cancelled(name)

    # ----------------------------------------------------------------- target
    def decode_target(self, tokens: list[int], *, logits: str, hidden: bool) -> np.ndarray | None:
        """Decode ``tokens`` after ``target_tokens`` (one batch, <= n_batch)."""
        pos0 = len(self.target_tokens)
        self.batch.set(tokens, pos0, logits)
        self.target.decode(self.batch)
        self.target_tokens.extend(tokens)
        if not hidden:
            self.last_hidden = None
            return None
        rows = self.target.hidden_rows(len(tokens)).copy()
        self.last_hidden = rows[-1]
        return rows

    def truncate_target(self, keep: int, *, hidden: bool) -> None:
        """Make the target hold exactly ``target_tokens[:keep]``."""
        if self._rewind_target(keep):
            return
        # llama.cpp cannot roll this state back: rebuild it from the tokens.
        self.repairs += 1
        tokens = self.target_tokens[:keep]
        self.target.clear()
        self.target_tokens = []
        self.last_hidden = None
        self._decode_chunks(tokens, hidden=hidden, cancel=None, want_logits=False)

    def _rewind_target(self, keep: int) -> bool:
        """Drop target positions from ``keep`` on, if llama.cpp can roll its state back
        that far; False (nothing changed) if it cannot."""
        if keep >= len(self.target_tokens):
            return True
        if not self.target.seq_rm(keep, -1):
            return False
        del self.target_tokens[keep:]
        self.last_hidden = None  # the caller sets it when it holds the row
        return True

    def _rewind_target_for_prompt(self, keep: int) -> None:
        """Like :meth:`truncate_target`, for a prefill that decodes the rest of the prompt
        next: when the state cannot be rolled back (recurrent layers roll back only a few
        tokens), start from empty. Rebuilding the prefix would decode the same tokens in
        one more call, which costs more than it saves (a whole forward for a short one)."""
        if not self._rewind_target(keep):
            self.target.clear()
            self.target_tokens = []
            self.last_hidden = None

    def decode_tokens(self, tokens: list[int], *, want_logits: bool, fresh: bool = False) -> None:
        """Decode ``tokens`` after ``target_tokens`` (``fresh``: into an emptied context,
        without hidden states) in ``n_batch`` chunks, logits on the last row when asked.
        For measurement tools; generation goes through :meth:`prefill`."""
        if fresh:
            self.reset()
            self.target.set_nextn_embeddings(False)
        if tokens:
            self._decode_chunks(tokens, hidden=False, cancel=None, want_logits=want_logits)

    def _decode_chunks(
        self, tokens: list[int], *, hidden: bool, cancel: threading.Event | None, want_logits: bool
    ) -> list[np.ndarray]:
        """Decode ``tokens`` in n_batch chunks; returns the hidden rows of each chunk."""
        out: list[np.ndarray] = []
        step = self.target.n_batch
        for i in range(0, len(tokens), step):
            if i:
                self.phase("prefill", cancel)
            chunk = tokens[i : i + step]
            last = i + step >= len(tokens)
            rows = self.decode_target(chunk, logits=LOGITS_LAST if (last and want_logits) else LOGITS_NONE, hidden=hidden)
            if rows is not None:
                out.append(rows)
        return out

    # ------------------------------------------------------------------ draft
    def truncate_draft(self, keep: int) -> None:
        assert self.draft is not None
        if keep < len(self.draft_tokens):
            if not self.draft.seq_rm(keep, -1):  # attention-only: cannot fail, but check
                self.draft.clear()
                keep = 0
            del self.draft_tokens[keep:]
            self.fed.truncate(keep)

    def feed_draft(self, tokens: list[int], hidden: np.ndarray, *, logits_last: bool) -> None:
        """Append MTP entries for ``tokens`` (positions ``len(draft_tokens)..``) paired with
        ``hidden`` (the target's hidden state of each previous position)."""
        assert self.draft is not None and self.dbatch is not None
        step = self.draft.n_batch
        for i in range(0, len(tokens), step):
            chunk = tokens[i : i + step]
            last = i + step >= len(tokens)
            self.dbatch.set(
                chunk, len(self.draft_tokens), LOGITS_LAST if (last and logits_last) else LOGITS_NONE, hidden[i : i + step]
            )
            self.draft.decode(self.dbatch)
            self.fed.add(len(self.draft_tokens), chunk, hidden[i : i + step])
            self.draft_tokens.extend(chunk)

    def draft_step(self, token: int, hidden: np.ndarray, choose: Choose | None = None) -> tuple[int, np.ndarray]:
        """One chained MTP step at the next position: (draft token, its hidden state).
        The draft is the argmax of the head's logits, or ``choose(logits)`` (sampled
        drafts). The entry it adds must be removed later (``truncate_draft``)."""
        assert self.draft is not None and self.dbatch is not None
        self.dbatch.set([token], len(self.draft_tokens), LOGITS_ALL, hidden[None, :])
        self.draft.decode(self.dbatch)
        self.fed.add(len(self.draft_tokens), [token], hidden[None, :])
        self.draft_tokens.append(token)
        d = self.draft.argmax(0) if choose is None else choose(self.draft.logits(0))
        return d, self.draft.hidden_row(0).copy()

    def draft_head(self, choose: Choose | None = None) -> tuple[int, np.ndarray]:
        """Draft token and hidden state of the last MTP entry fed with logits on."""
        assert self.draft is not None and self.dbatch is not None
        d = self.draft.argmax(-1) if choose is None else choose(self.draft.logits(-1))
        return d, self.draft.hidden_row(self.dbatch.n - 1).copy()

    # ---------------------------------------------------------------- prefill
    def prefill(
        self,
        prompt: list[int],
        *,
        speculative: bool,
        cancel: threading.Event | None,
        choose_first: Choose | None = None,
        defer_mtp: int | None = None,
        points: tuple[int, ...] = (),
    ) -> Prefill:
        """Bring the target (and MTP) context to ``prompt``, reusing the common prefix,
        and return the token after it: the greedy one, or ``choose_first(logits)``.

        With ``speculative`` the MTP entries of the prompt are fed chunk by chunk along
        with the target (so a cancel between chunks leaves both in step), and the entry
        of the first generated token is left in :attr:`lag` for the first draft. With
        ``defer_mtp`` (drafting is off for now) they are not fed: the newest ``defer_mtp``
        wait in the lag and older ones become holes, as after any stretch without drafts.

        With a prompt :attr:`cache`, the contexts first resume from the snapshot sharing
        the most with the prompt when that beats what they hold, and snapshots are taken
        at its marks on the way (``points``: the request's, e.g. message boundaries)."""
        n = len(prompt)
        if n == 0:
            raise ValueError("empty prompt")
        if n >= self.n_ctx:
            raise PromptTooLongError(n, self.n_ctx)
        use_mtp = speculative and self.draft is not None
        self.target.set_nextn_embeddings(use_mtp)
        restored = 0
        if self.cache is not None:
            restored = self.cache.resume(self, prompt, n - 1)
            if restored:
                self.phase("restore", cancel)
        if use_mtp and self.lag.tokens:
            # MTP entries left unfed by the last generation: feed those the new prompt
            # still starts with, in one batch with no extra target work.
            keep = common_prefix_entries(self.draft_tokens + self.lag.tokens, prompt) - len(self.draft_tokens)
            del self.lag.tokens[max(keep, 0) :], self.lag.hidden[max(keep, 0) :]
            self.sync_draft(logits_last=False)
        self.lag.clear()

        # At least the last prompt token is decoded: its logits give the first token.
        c = min(common_prefix(self.target_tokens, prompt), n - 1)
        if use_mtp:
            m = min(common_prefix_entries(self.draft_tokens, prompt), n)
            # MTP entry p needs the target's hidden state of position p-1. We will know
            # it for p-1 >= c (and p-1 == c-1 when nothing is removed and the last hidden
            # state is at hand); entries before that must already be in the MTP context.
            have_prev = c > 0 and len(self.target_tokens) == c and self.last_hidden is not None
            known_from = c - 1 if have_prev else c
            if max(m - 1, 0) < known_from:
                if self.target.model.is_recurrent and c == len(self.target_tokens):
                    # the target cannot be cut back to where the entries end: the missing
                    # entries become holes instead of the whole prompt being decoded again
                    self.truncate_draft(m)
                    self.draft_tokens.extend([HOLE] * (known_from + 1 - m))
                    m = len(self.draft_tokens)
                else:
                    c = max(m - 1, 0)
            self._rewind_target_for_prompt(c)
            c = len(self.target_tokens)
            self.truncate_draft(m)
        else:
            self._rewind_target_for_prompt(c)
            c = len(self.target_tokens)

        step = self.target.n_batch
        marks = self.cache.marks(self, c, n, points) if self.cache is not None else []
        i = c
        while i < n:
            if i > c:
                self.phase("prefill", cancel)
            end = min(i + step, n)
            marked = bool(marks) and marks[0] <= end  # marks lie in (c, n), ascending
            if marked:
                end = marks.pop(0)
            prev = self.last_hidden
            rows = self.decode_target(prompt[i:end], logits=LOGITS_LAST, hidden=use_mtp)
            if use_mtp:
                assert rows is not None
                self._feed_prompt_entries(prompt, i, prev, rows, defer=defer_mtp)
            if marked:
                assert self.cache is not None
                self.cache.save(self)
            i = end
        logits = self.target.logits(-1).copy()
        first = int(np.argmax(logits)) if choose_first is None else choose_first(logits)
        if use_mtp:
            assert self.last_hidden is not None
            self.lag.append(first, self.last_hidden)
        return Prefill(c, n - c, first, logits, restored=min(restored, c))

    def _feed_prompt_entries(
        self, prompt: list[int], pos: int, prev: np.ndarray | None, rows: np.ndarray, *, defer: int | None = None
    ) -> None:
        """Feed the MTP entries up to the end of the target chunk just decoded
        (positions ``pos .. pos+len(rows)-1``, whose hidden states are ``rows``); with
        ``defer``, keep the newest ``defer`` of them in the lag instead."""
        end = pos + len(rows)
        start = len(self.draft_tokens) + len(self.lag.tokens)
        if start >= end:
            return
        hidden = np.empty((end - start, self.n_embd), np.float32)
        for j, p in enumerate(range(start, end)):
            if p == 0:
                hidden[j] = 0.0
            elif p - 1 >= pos:
                hidden[j] = rows[p - 1 - pos]
            else:
                assert p - 1 == pos - 1 and prev is not None, "hidden state of a kept position is unknown"
                hidden[j] = prev
        if defer is None:
            self.feed_draft(prompt[start:end], hidden, logits_last=False)
            return
        self.lag.extend(prompt[start:end], hidden)
        drop = len(self.lag.tokens) - defer
        if drop > 0:
            self.draft_tokens.extend([HOLE] * drop)
            del self.lag.tokens[:drop], self.lag.hidden[:drop]

    # -------------------------------------------------------------------- lag
    def sync_draft(self, *, logits_last: bool, keep_last: int | None = None, width: int = 0) -> None:
        """Feed the MTP entries waiting in :attr:`lag` (one batch). Entries past the end
        of the context (the token after a full context) are dropped.

        With ``keep_last``, only the newest entries are fed and older ones become holes:
        after a long stretch without drafting, catching the MTP context up on every
        position would cost more than drafting gains. A hole only leaves the MTP head's
        attention a little less context; it never affects the output.

        With ``width``, a batch narrower than that is widened by decoding the newest
        entries already fed once more (the same token, position and hidden row), when
        they are known: llama.cpp rebuilds its graph whenever a context's batch width
        changes (~20 us on the demo's head, a third of the decode), so a loop whose only
        MTP decode is this one keeps its width constant."""
        assert self.draft is not None
        skip = max(0, len(self.lag.tokens) - keep_last) if keep_last is not None else 0
        if skip:
            self.draft_tokens.extend([HOLE] * skip)
            self.fed.clear()
            del self.lag.tokens[:skip], self.lag.hidden[:skip]
        room = self.draft.n_ctx - len(self.draft_tokens)
        tokens, hidden = self.lag.tokens[:room], self.lag.hidden[:room]
        if tokens:
            rows = np.stack(hidden)
            pad = self.fed.refeed(self.draft_tokens, width - len(tokens)) if width > len(tokens) else 0
            if pad:
                p = len(self.draft_tokens) - pad
                again_tokens, again_rows = self.fed.entries(p, pad)
                self.truncate_draft(p)
                tokens, rows = [*again_tokens, *tokens], np.concatenate([again_rows, rows])
            self.feed_draft(tokens, rows, logits_last=logits_last)
        self.lag.clear()


class FedTail:
    """The newest entries decoded into the MTP context: position of the first, tokens and
    hidden rows (the rows as fed). Used only where the MTP context still holds them, as
    :meth:`refeed` checks against ``draft_tokens``."""

    SIZE = 4

    def __init__(self):
        self.start = 0
        self.tokens: list[int] = []
        self.rows: list[np.ndarray] = []

    def clear(self) -> None:
        self.tokens.clear()
        self.rows.clear()

    def add(self, pos: int, tokens: list[int], rows: np.ndarray) -> None:
        if pos != self.start + len(self.tokens):
            self.clear()
            self.start = pos
        drop = len(tokens) - self.SIZE  # a prompt chunk: only its newest entries can be kept
        if drop > 0:
            self.clear()
            self.start = pos + drop
            tokens, rows = tokens[drop:], rows[drop:]
        self.tokens.extend(tokens)
        self.rows.extend(rows.copy())  # not views that keep a whole chunk's rows alive
        cut = len(self.tokens) - self.SIZE
        if cut > 0:
            del self.tokens[:cut], self.rows[:cut]
            self.start += cut

    def truncate(self, keep: int) -> None:
        n = max(0, keep - self.start)
        del self.tokens[n:], self.rows[n:]

    def refeed(self, draft_tokens: list[int], want: int) -> int:
        """How many of the newest ``want`` entries can be decoded again (0: none are
        known, or the context no longer holds what was fed there)."""
        end = len(draft_tokens)
        if end != self.start + len(self.tokens):
            return 0
        n = min(want, len(self.tokens))
        if n <= 0 or draft_tokens[end - n : end] != self.tokens[len(self.tokens) - n :]:
            return 0
        return n

    def entries(self, pos: int, n: int) -> tuple[list[int], np.ndarray]:
        i = pos - self.start
        return self.tokens[i : i + n], np.stack(self.rows[i : i + n])


class Lag:
    """MTP entries not fed yet: tokens at the positions after ``draft_tokens``, each with
    the target's hidden state of the previous position. While drafting is off (depth 0)
    they accumulate here and are fed in one batch when drafting resumes, or when the
    next prompt still contains them."""

    def __init__(self):
        self.tokens: list[int] = []
        self.hidden: list[np.ndarray] = []

    def append(self, token: int, hidden: np.ndarray) -> None:
        self.tokens.append(token)
        self.hidden.append(hidden)

    def extend(self, tokens: list[int], hidden: np.ndarray) -> None:
        self.tokens.extend(tokens)
        self.hidden.extend(hidden)

    def clear(self) -> None:
        self.tokens.clear()
        self.hidden.clear()
