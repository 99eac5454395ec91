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
