"""The target (and MTP) context of one loaded model and exactly which tokens they hold.

Bookkeeping invariants (engine thread only):

* ``target_tokens``: the tokens whose KV / recurrent state is in the target context, at
  positions ``0..n-1``. The last *emitted* token of a generation is not among them until
  something decodes it.
* ``last_hidden``: the target's hidden state for ``target_tokens[-1]`` when known.
* ``draft_tokens``: the MTP context holds entry ``p`` for token ``draft_tokens[p]`` paired
  with the target's hidden state of position ``p - 1``. An entry depends only on tokens
  ``0..p``, so the entries along the common prefix with a new prompt stay valid.
* A head that shares the target's memory (:attr:`Session.shared`: Gemma 4 assistants)
  has no entries: it attends over the target's own KV cache, so ``draft_tokens`` stays
  empty and only the newest entry of the lag is ever used, for the next draft.

A rollback that llama.cpp refuses (``seq_rm`` returns False: recurrent state rolls back
only within ``n_rs_seq`` tokens of the last decode, once) is repaired by clearing the
context and re-decoding the tokens to keep; it is counted, never ignored.

The session keeps these invariants through its own methods: bringing it up to a prompt is
:mod:`engine.runtime.decode.prefill`'s algorithm over them, and it captures and restores
its own state (:meth:`Session.snapshot`, :meth:`Session.restore`) for the prompt cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from engine.errors import Cancelled
from engine.runtime.decode.entries import HOLE, Choose, FedTail, Lag
from engine.runtime.decode.cache.snapshot import Snapshot, token_key
from engine.runtime.llama.batch import LOGITS_ALL, LOGITS_LAST, LOGITS_NONE, Batch
from engine.runtime.llama.context import Context
from engine.runtime.media.rows import Positions, decode_run, feed_media_rows

#: the most of a prompt's last positions the MTP head is fed before its first draft. Its
#: attention over a long prompt costs as much as one trunk attention layer (on the demo,
#: with one such layer in four, MTP doubled a 20k-token prompt's time); the head drafts
#: from the target's hidden state, which has seen the whole prompt, and from the recent
#: tokens, so the positions before the window become holes (docs/agent-speed.md).
MTP_PROMPT_WINDOW = 2048
#: ... and within that, the window keeps the head's share of a prompt's time near this,
#: by its layers against the trunk's (a small model's head is a large part of it) ...
MTP_PROMPT_SHARE = 0.08
#: ... but never below this many positions
MIN_PROMPT_WINDOW = 256


class Session:
    def __init__(self, target: Context, draft: Context | None = None, *, heads: int = 1, holes_ok: bool = True):
        self.target = target
        self.draft = draft
        self.n_embd = target.model.n_embd_out  # the hidden rows' width
        # of the contexts' sequence (a slot's: engine.runtime.slots.seqcontext), so a sequence
        # decoding alone hands its own batch to llama.cpp, with no copy
        self.batch = Batch(target.n_batch, seq=getattr(target, "seq", 0))
        self.dbatch = Batch(draft.n_batch, self.n_embd, seq=getattr(draft, "seq", 0)) if draft is not None else None
        self.target_tokens: list[int] = []
        self.draft_tokens: list[int] = []
        self.last_hidden: np.ndarray | None = None
        self.lag = Lag()
        #: the newest entries decoded into the MTP context, for re-feeding (sync_draft's width)
        self.fed = FedTail()
        self.repairs = 0
        #: rejections deeper than the recurrent rollback reaches, undone from a checkpoint
        #: (the recurrent state before the verify, then the kept tokens decoded again)
        self.replays = 0
        self._checkpoint: tuple[int, bytearray] | None = None
        #: the target cannot be cut back below this position: after restoring a snapshot of
        #: a sliding-window model it holds only the window's cells before the snapshot's
        #: end, and a decode cut back further would attend over cells that are gone
        self.floor = 0
        #: chained heads (step35, mimo2, hy_v3 with several NextN blocks): head i drafts
        #: token i and keeps its own KV, so every MTP entry is decoded once per head
        self.heads = heads
        #: the MTP context may skip positions (holes): llama.cpp allows a batch's positions
        #: to jump forward only with M-RoPE (qwen35); every other family's context needs
        #: them consecutive, so entries are caught up instead (engine.gguf.families)
        self.holes_ok = holes_ok
        #: the MTP context reads the target's KV cache (llama.cpp's shared-memory mode):
        #: nothing is ever fed into it, and every draft token of a round sits at the same
        #: position, the one after the target's last (common_speculative's is_mem_shared)
        self.shared = draft is not None and draft.shares_memory
        #: MTP entries of a prompt before its last ``prompt_window`` positions are not fed
        self.prompt_window = MTP_PROMPT_WINDOW
        #: test seam: called with a phase name at every cancellation point
        self.phase_hook: Callable[[str], None] | None = None
        #: a picture's rows (negative ids: engine.runtime.media.projector) enter the MTP context
        #: as this token with the target's hidden row before each; None: as holes (llama-server's)
        self.media_row_token: int | None = None
        self._media_batch = None  # engine.runtime.media.batch.MediaBatch, made when first needed
        self.media: dict = {}  # the chunks of the pictures whose rows the target holds
        #: the target's position of each row (they part after an M-RoPE picture)
        self.positions = Positions()

    def close(self) -> None:
        self.batch.close()
        if self.dbatch is not None:
            self.dbatch.close()
        if self._media_batch is not None:
            self._media_batch.close()

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    def reset(self) -> None:
        self._clear_target()
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
        self.batch.set(tokens, self.positions.of(len(self.target_tokens)), logits)
        self.target.decode(self.batch)
        self.target_tokens.extend(tokens)
        if not hidden:
            self.last_hidden = None
            return None
        rows = self.target.hidden_rows(len(tokens)).copy()
        self.last_hidden = rows[-1]
        return rows

    def decode_media(self, chunk, start: int, stop: int, *, logits: str, hidden: bool) -> np.ndarray | None:
        """:meth:`decode_target` for rows ``start..stop`` of a picture's ``chunk``
        (:class:`~engine.runtime.media.projector.MediaChunk`)."""
        from engine.runtime.media.batch import batch_for

        n = stop - start
        b = self._media_batch = batch_for(self._media_batch, chunk, n, self.target.n_batch, self.batch.seq)
        first = len(self.target_tokens) - start
        b.fill(chunk, start, stop, self.positions.of(first), logits_last=logits == LOGITS_LAST)
        self.target.decode(b)
        self.target_tokens.extend([chunk.token] * n)
        if stop == chunk.n_tokens:
            self.positions.add(len(self.target_tokens), chunk.shift)
        if not hidden:
            self.last_hidden = None
            return None
        rows = self.target.hidden_rows(n).copy()
        self.last_hidden = rows[-1]
        return rows

    def checkpoint(self, drafts: int) -> None:
        """Before a verify of ``drafts`` drafts: when rejecting them could need a rollback
        deeper than llama.cpp's recurrent snapshots reach (``n_rs_seq``: a suffix draft is
        wider than the MTP depth the contexts are sized for), keep the recurrent state as it
        is now, as llama-server does, so :meth:`truncate_target` can start from it and
        decode only the kept tokens again instead of the whole context."""
        t = self.target
        self._checkpoint = None
        if drafts > t.n_rs_seq and t.model.is_recurrent:
            self._checkpoint = (len(self.target_tokens), t.partial_get())

    def truncate_target(self, keep: int, *, hidden: bool) -> None:
        """Make the target hold exactly ``target_tokens[:keep]``."""
        if self._rewind_target(keep) or self._replay_from_checkpoint(keep, hidden):
            return
        # llama.cpp cannot roll this state back: rebuild it from the tokens.
        self.repairs += 1
        tokens = self.target_tokens[:keep]
        self._clear_target()
        self._decode_chunks(tokens, hidden=hidden, cancel=None, want_logits=False)

    def _replay_from_checkpoint(self, keep: int, hidden: bool) -> bool:
        ck, self._checkpoint = self._checkpoint, None
        if ck is None:
            return False
        n, data = ck
        if not (self.floor <= n <= keep <= len(self.target_tokens)):
            return False
        if not (self.target.partial_set(data) and self.target.seq_rm(self.positions.of(n), -1)):
            return False  # the full repair starts from an emptied context
        again = self.target_tokens[n:keep]
        del self.target_tokens[n:]
        self.positions.keep(n)
        self.last_hidden = None
        self.replays += 1
        self._decode_chunks(again, hidden=hidden, cancel=None, want_logits=False)
        return True

    def _rewind_target(self, keep: int) -> bool:
        """Drop target positions from ``keep`` on, if llama.cpp can roll its state back
        that far; False (nothing changed) if it cannot — nor over a picture's rows in a
        recurrent state, which counts a rollback in positions, and a picture's share one."""
        if keep >= len(self.target_tokens):
            return True
        over_picture = self.target.model.is_recurrent and any(t < 0 for t in self.target_tokens[keep:])
        if keep < self.floor or over_picture or not self.target.seq_rm(self.positions.of(keep), -1):
            return False
        del self.target_tokens[keep:]
        self.positions.keep(keep)
        self.last_hidden = None  # the caller sets it when it holds the row
        return True

    def rewind_for_prompt(self, keep: int) -> None:
        """Like :meth:`truncate_target`, for a prefill that decodes the rest of the prompt
        next: when the state cannot be rolled back (recurrent layers roll back only a few
        tokens), start from empty. Rebuilding the prefix would decode the same tokens in
        one more call, which costs more than it saves (a whole forward for a short one)."""
        if not self._rewind_target(keep):
            self._clear_target()

    def _clear_target(self) -> None:
        self._checkpoint = None
        self.target.clear()
        self.target_tokens = []
        self.positions.clear()
        self.last_hidden = None
        self.floor = 0

    def decode_tokens(self, tokens: list[int], *, want_logits: bool, fresh: bool = False) -> None:
        """Decode ``tokens`` after ``target_tokens`` (``fresh``: into an emptied context,
        without hidden states) in ``n_batch`` chunks, logits on the last row when asked.
        For measurement tools; generation goes through :mod:`~engine.runtime.decode.prefill`."""
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
        step, i, n = self.target.n_batch, 0, len(tokens)
        while i < n:
            if i:
                self.phase("prefill", cancel)
            end = min(i + step, n)
            # a picture's rows are decoded from its chunk (the prompt's: self.media)
            end, rows = decode_run(self, tokens, i, end, self.media, hidden=hidden, logits=end >= n and want_logits)
            if rows is not None:
                out.append(rows)
            i = end
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
        if any(t < 0 for t in tokens):  # a picture's rows
            feed_media_rows(self, tokens, hidden, logits_last=logits_last)
            return
        step = self.draft.n_batch
        for i in range(0, len(tokens), step):
            chunk = tokens[i : i + step]
            last = i + step >= len(tokens)
            pos = len(self.draft_tokens)
            self.dbatch.set(chunk, pos, LOGITS_LAST if (last and logits_last) else LOGITS_NONE, hidden[i : i + step])
            self._decode_heads(pos)
            self.fed.add(len(self.draft_tokens), chunk, hidden[i : i + step])
            self.draft_tokens.extend(chunk)

    def _decode_heads(self, pos: int) -> None:
        """Decode :attr:`dbatch` (entries from ``pos``) into the MTP context, once per head
        with chained heads, as llama.cpp's draft-mtp does: the last head first, head 0
        last (its logits are the ones read); before each decode after the first the
        entries just written are removed, so each head writes its own layer's KV there."""
        assert self.draft is not None and self.dbatch is not None
        if self.heads == 1:
            self.draft.decode(self.dbatch)
            return
        for head in reversed(range(self.heads)):
            if head != self.heads - 1:
                self.draft.seq_rm(pos, -1)
            with self._head(head):
                self.draft.decode(self.dbatch)

    @contextmanager
    def _head(self, head: int) -> Iterator[None]:
        """Run the MTP context's decodes under NextN block ``head``; head 0 again after."""
        assert self.draft is not None
        self.draft.set_nextn_layer_offset(head)
        try:
            yield
        finally:
            self.draft.set_nextn_layer_offset(0)

    def chain_step(
        self, pos0: int, tokens: list[int], rows: np.ndarray, head: int, choose: Choose | None = None
    ) -> tuple[int, np.ndarray]:
        """Chained heads: head ``head`` drafts the token after ``tokens`` (entries from
        ``pos0``: the last accepted token and the drafts so far, with the hidden rows
        before each), decoding the whole prefix under its own layer. The entries it adds
        must be removed later (``truncate_draft``)."""
        assert self.draft is not None and self.dbatch is not None
        self.truncate_draft(pos0)
        self.dbatch.set(tokens, pos0, LOGITS_LAST, rows)
        with self._head(head):
            self.draft.decode(self.dbatch)
        self.draft_tokens.extend(tokens)
        d = self.draft.argmax(-1) if choose is None else choose(self.draft.logits(-1))
        return d, self.draft.hidden_row(0).copy()

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

    def shared_step(
        self, token: int, pos0: int, hidden: np.ndarray, choose: Choose | None = None
    ) -> tuple[int, np.ndarray]:
        """Shared memory: the draft after ``token``, given the hidden row before it, at
        ``pos0`` (the position after the target's last, whatever the draft's index: the
        head attends over the target's cache and writes nothing). Nothing to remove after."""
        assert self.shared and self.draft is not None and self.dbatch is not None
        self.dbatch.set([token], self.positions.of(pos0), LOGITS_ALL, hidden[None, :])  # over the target's cells
        self.draft.decode(self.dbatch)
        d = self.draft.argmax(0) if choose is None else choose(self.draft.logits(0))
        return d, self.draft.hidden_row(0).copy()

    def draft_head(self, choose: Choose | None = None) -> tuple[int, np.ndarray]:
        """Draft token and hidden state of the last MTP entry fed with logits on."""
        assert self.draft is not None and self.dbatch is not None
        d = self.draft.argmax(-1) if choose is None else choose(self.draft.logits(-1))
        return d, self.draft.hidden_row(0).copy()  # its only output row

    # ---------------------------------------------------------- prompt entries
    def window(self, n: int) -> int:
        """How many of an ``n``-token prompt's last positions the head is fed: at most
        :attr:`prompt_window`, fewer where the head's layers are a large part of the model."""
        model = self.target.model
        trunk = max(1, model.n_layer)  # llama.cpp counts the trunk's blocks (NextN apart)
        cap = self.prompt_window
        return max(min(MIN_PROMPT_WINDOW, cap), min(cap, int(n * MTP_PROMPT_SHARE * trunk / max(1, self.heads))))

    def add_holes(self, n: int) -> None:
        """Skip the next ``n`` MTP positions (they stay absent from the MTP context)."""
        self.draft_tokens.extend([HOLE] * n)

    def skip_draft_to(self, keep: int, pos: int) -> None:
        """Keep the MTP entries before ``keep`` and leave positions ``keep..pos-1``
        absent, so the next entry fed is ``pos``. A context that cannot skip positions
        (:attr:`holes_ok` False) starts over empty instead: llama.cpp lets an empty
        context's first batch begin at any position."""
        assert keep <= pos
        if self.holes_ok:
            self.truncate_draft(keep)
        else:
            self.truncate_draft(0)
            keep = 0
        self.add_holes(pos - keep)

    def feed_prompt_entries(
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
        if drop > 0 and self.holes_ok:
            self.add_holes(drop)
            self.lag.drop_oldest(drop)

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
        skip = max(0, len(self.lag.tokens) - keep_last) if keep_last is not None and self.holes_ok else 0
        if skip:
            self.add_holes(skip)
            self.fed.clear()
            self.lag.drop_oldest(skip)
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

    # -------------------------------------------------------------- snapshots
    def snapshot(self) -> Snapshot:
        """The session's state now (:mod:`engine.runtime.decode.cache.snapshot`). Raises
        MemoryError when host memory cannot hold it."""
        tokens = np.asarray(self.target_tokens, np.int32)
        lag = self.lag
        return Snapshot(
            tokens=tokens,
            target=self.target.state_get(),
            draft=self.draft.state_get() if self.draft is not None and not self.shared else None,
            draft_tokens=tuple(self.draft_tokens) if self.draft is not None else (),
            last_hidden=None if self.last_hidden is None else self.last_hidden.copy(),
            lag_tokens=tuple(lag.tokens),
            lag_hidden=np.stack(lag.hidden) if lag.hidden else None,
            key=token_key(tokens),
        )

    def restore(self, snap: Snapshot) -> None:
        """Hold ``snap``'s state. Raises ContextError (the session then holds nothing:
        empty contexts) when llama.cpp refuses the bytes."""
        try:
            self.target.state_set(snap.target)
            if self.draft is not None and not self.shared:
                if snap.draft is not None:
                    self.draft.state_set(snap.draft)
                    self.draft_tokens = list(snap.draft_tokens)
                elif self.holes_ok:  # no MTP entries were kept: the head goes on with holes up to here
                    self.draft.clear()
                    self.draft_tokens = [HOLE] * (snap.n if snap.last_hidden is not None else snap.n + 1)
                else:  # ... and this context cannot skip them: the next prefill feeds them all again
                    self.draft.clear()
                    self.draft_tokens = []
        except Exception:
            self.reset()
            raise
        self.target_tokens = snap.tokens.tolist()
        self.positions.find(self.target_tokens, self.media)
        n_swa = self.target.model.n_swa
        # decoding at position p reads the cells after p - n_swa; the snapshot kept those
        # after its last position - n_swa (every one while it was shorter than the window)
        self.floor = snap.n - 1 if n_swa and snap.n > n_swa else 0
        self.last_hidden = None if snap.last_hidden is None else snap.last_hidden.copy()
        self.lag.clear()
        self.fed.clear()
        if snap.lag_tokens and self.draft is not None and snap.draft is not None:
            assert snap.lag_hidden is not None
            self.lag.extend(list(snap.lag_tokens), snap.lag_hidden.copy())
