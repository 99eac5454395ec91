"""A prompt's rows where pictures stand among its tokens: where a picture's rows begin,
and decoding a stretch of a prompt that may hold them.

A picture's rows are one negative id repeated (:mod:`engine.runtime.media.projector`);
contexts are kept or rewound only at a picture's edge, never inside one. Used by the
prefill (:mod:`engine.runtime.decode.prefill`) and by a session's repairs, which decode
the rows they keep again (:meth:`~engine.runtime.decode.session.Session.truncate_target`).
"""

from __future__ import annotations

import numpy as np

from engine.errors import MtpStudioError
from engine.runtime.llama.batch import LOGITS_LAST, LOGITS_NONE
from engine.runtime.media.projector import MediaChunk


class Positions:
    """The target's position of each of a session's rows: one a row, except that an M-RoPE
    picture takes fewer positions than rows (libmtmd's n_pos, max(nx, ny)), so rows and
    positions part after one, as llama.cpp lays them out."""

    def __init__(self) -> None:
        #: (the row after a picture, positions fewer than rows up to there), ascending
        self._shifts: list[tuple[int, int]] = []

    def of(self, row: int) -> int:
        shifts = self._shifts
        if not shifts:
            return row
        if row >= shifts[-1][0]:
            return row - shifts[-1][1]
        return row - next((t for end, t in reversed(shifts) if end <= row), 0)

    def add(self, end: int, shift: int) -> None:
        """A picture whose rows end before row ``end`` takes ``shift`` fewer positions."""
        if shift:
            self._shifts.append((end, (self._shifts[-1][1] if self._shifts else 0) + shift))

    def keep(self, rows: int) -> None:
        """Only the first ``rows`` rows are held now."""
        while self._shifts and self._shifts[-1][0] > rows:
            self._shifts.pop()

    def clear(self) -> None:
        self._shifts = []

    def find(self, tokens: list[int], media: dict[int, MediaChunk]) -> None:
        """The pictures ``tokens`` holds (contexts restored from a snapshot), as far as
        their chunks are known."""
        self._shifts, i = [], 0
        while i < len(tokens):
            if tokens[i] >= 0:
                i += 1
                continue
            chunk = media.get(tokens[i])
            if chunk is None:
                return
            i += chunk.n_tokens
            if i <= len(tokens):
                self.add(i, chunk.shift)


def chunk_edge(prompt: list[int], i: int) -> int:
    """``i``, or where the media chunk holding prompt row ``i`` begins."""
    if i <= 0 or i >= len(prompt) or prompt[i] >= 0:
        return max(i, 0)
    while i > 0 and prompt[i - 1] == prompt[i]:
        i -= 1
    return i


def decode_run(
    s, prompt: list[int], i: int, end: int, media: dict[int, MediaChunk] | None, *, hidden: bool, logits: bool = True
) -> tuple[int, np.ndarray | None]:
    """Decode from row ``i`` of ``prompt`` on session ``s``: the text before the next
    picture (at most to ``end``), or the picture's rows from ``i`` (at most to ``end``;
    a chunk that must be decoded in one micro-batch, whole). Returns where it stopped and
    the hidden rows (with ``hidden``)."""
    which = LOGITS_LAST if logits else LOGITS_NONE
    tok = prompt[i]
    if tok >= 0:
        j = i
        while j < end and prompt[j] >= 0:
            j += 1
        return j, s.decode_target(prompt[i:j], logits=which, hidden=hidden)
    chunk = (media or {}).get(tok)
    if chunk is None or not chunk.embd.shape[1]:
        raise MtpStudioError("a prompt holds a picture's rows but not the picture: prepare it with its media")
    first = chunk_edge(prompt, i)
    start = (i - first) % chunk.n_tokens
    stop = chunk.n_tokens if chunk.non_causal else min(chunk.n_tokens, start + end - i)
    if chunk.non_causal and (start or chunk.n_tokens > s.target.n_ubatch):
        raise MtpStudioError(
            f"this picture's {chunk.n_tokens} rows must be decoded in one micro-batch, and the context's holds "
            f"{s.target.n_ubatch}: load the model with a larger micro-batch (n_ubatch)"
        )
    rows = s.decode_media(chunk, start, stop, logits=which, hidden=hidden)
    return i + stop - start, rows


def feed_media_rows(s, tokens: list[int], hidden: np.ndarray, *, logits_last: bool) -> None:
    """Session ``s``'s :meth:`~engine.runtime.decode.session.Session.feed_draft` of MTP
    entries holding a picture's rows: each as the session's ``media_row_token`` with the
    target's hidden row before it (None: as holes). ``draft_tokens`` keeps the picture's
    own ids, so a prompt with another picture does not match them."""
    i, n = 0, len(tokens)
    while i < n:
        media = tokens[i] < 0
        j = i
        while j < n and (tokens[j] < 0) == media:
            j += 1
        last = j == n
        if media and s.media_row_token is None:
            s.add_holes(j - i)
            s.fed.clear()
        else:
            run = [s.media_row_token] * (j - i) if media else tokens[i:j]
            start = len(s.draft_tokens)
            s.feed_draft(run, hidden[i:j], logits_last=logits_last and last)
            s.draft_tokens[start:] = tokens[i:j]
        i = j
