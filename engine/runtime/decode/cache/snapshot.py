"""A session's whole decoding state at one prompt position, copied to host memory.

A :class:`Snapshot` holds what :class:`~engine.runtime.decode.session.Session` needs to go
on from the position it was taken at as if it had decoded the tokens before it just now:
the target context's sequence state (KV cells, and on hybrid or recurrent models the
recurrent state, which llama.cpp cannot roll back), the MTP context's, and the
bookkeeping that pairs them with tokens — the MTP entries (holes included), the hidden
state of the last position (the next MTP entry's input) and the entries waiting in the
lag. Grammar state is not part of it: snapshots are taken of prompts, and a grammar
starts with each generation.

The session takes and restores its own snapshots (``Session.snapshot`` and
``Session.restore``); restoring makes the contexts hold exactly the bytes that were
saved, so what follows is bit-for-bit what followed when it was taken (and, in exact
mode, what decoding the whole prompt from scratch gives: batch-invariant arithmetic makes
the split points irrelevant). This module is plain data: it imports nothing of the
decode core.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


def token_key(tokens: np.ndarray | list[int]) -> bytes:
    """A digest of a token sequence (snapshot identity)."""
    return hashlib.blake2b(np.ascontiguousarray(tokens, np.int32).tobytes(), digest_size=16).digest()


@dataclass(eq=False)
class Snapshot:
    tokens: np.ndarray  # int32, the target's positions 0..n-1
    target: bytearray
    draft: bytearray | None
    draft_tokens: tuple[int, ...]
    last_hidden: np.ndarray | None
    lag_tokens: tuple[int, ...]
    lag_hidden: np.ndarray | None
    key: bytes

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def nbytes(self) -> int:
        extra = 0 if self.last_hidden is None else self.last_hidden.nbytes
        extra += 0 if self.lag_hidden is None else self.lag_hidden.nbytes
        return len(self.target) + (len(self.draft) if self.draft is not None else 0) + self.tokens.nbytes + extra
