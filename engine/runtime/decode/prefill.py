"""Bringing a session's contexts up to a prompt: what is reused, what is restored from
the prompt cache, what is decoded, and the MTP entries fed along the way.

:func:`prefill` is the algorithm; it changes the session only through the session's own
methods (:mod:`engine.runtime.decode.session` keeps the bookkeeping invariants). The
prompt cache (:class:`~engine.runtime.decode.cache.snapshotcache.SnapshotCache`) is passed in:
it stores snapshots and plans which to resume from; this module carries the plan out.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np

from engine.errors import MtpStudioError, PromptTooLongError
from engine.runtime.decode.entries import Choose, common_prefix, common_prefix_entries
from engine.runtime.decode.session import Session
from engine.runtime.decode.cache.snapshotcache import SnapshotCache
from engine.runtime.llama.batch import LOGITS_LAST
from engine.runtime.media.projector import MediaChunk
from engine.runtime.media.rows import chunk_edge, decode_run

log = logging.getLogger(__name__)


@dataclass
class Prefill:
    """Outcome of bringing the contexts up to a prompt."""

    reused: int  # prompt tokens already in the target context
    decoded: int  # prompt tokens decoded now
    first_token: int  # the token after the prompt (greedy, or as chosen)
    logits: np.ndarray  # copy of the last prompt row's logits (for sampling)
    restored: int = 0  # of ``reused``, tokens restored from a prompt-cache snapshot


def prefill(
    s: Session,
    prompt: list[int],
    *,
    speculative: bool,
    cancel: threading.Event | None,
    choose_first: Choose | None = None,
    defer_mtp: int | None = None,
    points: tuple[int, ...] = (),
    cache: SnapshotCache | None = None,
    media: dict[int, MediaChunk] | None = None,
) -> Prefill:
    """Bring the target (and MTP) context of ``s`` to ``prompt``, reusing the common
    prefix, and return the token after it: the greedy one, or ``choose_first(logits)``.

    With ``speculative`` the MTP entries of the prompt are fed chunk by chunk along with
    the target (so a cancel between chunks leaves both in step), and the entry of the
    first generated token is left in the session's lag for the first draft. With
    ``defer_mtp`` (drafting is off for now) they are not fed: the newest ``defer_mtp``
    wait in the lag and older ones become holes, as after any stretch without drafts.

    With a prompt ``cache``, the contexts first resume from the snapshot sharing the most
    with the prompt when that beats what they hold, and snapshots are taken at its marks
    on the way (``points``: the request's, e.g. message boundaries).

    ``media``: the chunks of a prompt with pictures (their rows are the chunk's negative
    id: engine.runtime.media.projector). A picture is reused whole or decoded whole: what
    is kept of the contexts ends at a chunk's edge, never inside one."""
    n = len(prompt)
    if n == 0:
        raise ValueError("empty prompt")
    if n >= s.n_ctx:
        raise PromptTooLongError(n, s.n_ctx)
    use_mtp = speculative and s.draft is not None
    #: MTP entries go into an MTP context of its own; a head sharing the target's memory
    #: needs only the hidden state of the prompt's last token
    entries = use_mtp and not s.shared
    s.target.set_nextn_embeddings(use_mtp)
    s.media = media or {}  # before a restore: the pictures' positions come from their chunks
    restored = 0
    if cache is not None:
        restored = resume(s, cache, prompt, chunk_edge(prompt, n - 1))
        if restored:
            s.phase("restore", cancel)
    if entries and s.lag.tokens:
        # MTP entries left unfed by the last generation: feed those the new prompt
        # still starts with, in one batch with no extra target work.
        s.lag.keep(common_prefix_entries(s.draft_tokens + s.lag.tokens, prompt) - len(s.draft_tokens))
        s.sync_draft(logits_last=False)
    s.lag.clear()

    # At least the last prompt token is decoded: its logits give the first token.
    c = chunk_edge(prompt, min(common_prefix(s.target_tokens, prompt), n - 1))
    #: the first MTP entry fed: the head sees the prompt's last positions (Session.window)
    window = max(0, n - s.window(n))
    if entries:
        m = min(common_prefix_entries(s.draft_tokens, prompt), n)
        if m < window:
            s.skip_draft_to(m, window)
            m = window
        # MTP entry p needs the target's hidden state of position p-1. We will know
        # it for p-1 >= c (and p-1 == c-1 when nothing is removed and the last hidden
        # state is at hand); entries before that must already be in the MTP context.
        have_prev = c > 0 and len(s.target_tokens) == c and s.last_hidden is not None
        known_from = c - 1 if have_prev else c
        if max(m - 1, 0) < known_from:
            if s.holes_ok and s.target.model.is_recurrent and c == len(s.target_tokens):
                # the target cannot be cut back to where the entries end: the missing
                # entries become holes instead of the whole prompt being decoded again
                s.truncate_draft(m)
                s.add_holes(known_from + 1 - m)
                m = len(s.draft_tokens)
            else:
                c = chunk_edge(prompt, max(m - 1, 0))
        s.rewind_for_prompt(c)
        c = len(s.target_tokens)
        s.truncate_draft(m)
    else:
        s.rewind_for_prompt(c)
        c = len(s.target_tokens)

    step = s.target.n_batch
    marks = cache.marks(s.target.model.restores_cut_back, c, n, points) if cache is not None else []
    if media:  # a snapshot is taken at a picture's edge, never inside one
        marks = sorted({e for e in (chunk_edge(prompt, m) for m in marks) if c < e < n})
    i = c
    while i < n:
        if i > c:
            s.phase("prefill", cancel)
        end = min(i + step, n)
        marked = bool(marks) and marks[0] <= end  # marks lie in (c, n), ascending
        if marked:
            end = marks.pop(0)
        prev = s.last_hidden
        # hidden rows from the chunk holding the window's first entry's previous position on
        if prompt[i] < 0 or (media and any(t < 0 for t in prompt[i:end])):
            asked = end
            end, rows = decode_run(s, prompt, i, end, media, hidden=use_mtp)
            if marked and end < asked:  # stopped at a picture's edge before the mark
                marks.insert(0, asked)
                marked = False
        else:
            rows = s.decode_target(prompt[i:end], logits=LOGITS_LAST, hidden=use_mtp and end >= window)
        if entries and rows is not None:
            s.feed_prompt_entries(prompt, i, prev, rows, defer=defer_mtp)
        if marked:
            assert cache is not None
            cache.save(s.target_tokens, s.snapshot)
        i = end
    logits = s.target.logits(-1).copy()
    first = int(np.argmax(logits)) if choose_first is None else choose_first(logits)
    if use_mtp:
        assert s.last_hidden is not None
        s.lag.append(first, s.last_hidden)
    return Prefill(c, n - c, first, logits, restored=min(restored, c))


def resume(s: Session, cache: SnapshotCache, prompt: list[int], limit: int) -> int:
    """Before prefilling ``prompt`` (of which at most ``limit`` tokens may be reused):
    restore the snapshot the cache plans on, saving the live state first when the plan
    would lose it. Returns the tokens restored (0: the live contexts go on, or nothing is
    reused)."""
    plan = cache.plan(s.target_tokens, prompt, limit, cut=s.target.model.restores_cut_back)
    if plan.save_live:
        cache.save(s.target_tokens, s.snapshot)
    if plan.snap is None:
        cache.note_live(plan.live_n)
        return 0
    try:
        s.restore(plan.snap)
    except MtpStudioError as e:  # llama.cpp refused the bytes: decode from scratch
        log.warning("prompt cache: dropped a snapshot that could not be restored: %s", e)
        cache.note_refused(plan.snap)
        return 0
    cache.note_restored(plan.snap, plan.n)
    return plan.n
