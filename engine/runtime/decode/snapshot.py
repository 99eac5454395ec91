"""A session's whole decoding state at one prompt position, copied to host memory.

A :class:`Snapshot` holds what :class:`~engine.runtime.decode.session.Session` needs to go
on from the position it was taken at as if it had decoded the tokens before it just now:
the target context's sequence state (KV cells, and on hybrid or recurrent models the
recurrent state, which llama.cpp cannot roll back), the MTP context's, and the
bookkeeping that pairs them with tokens — the MTP entries (holes included), the hidden
state of the last position (the next MTP entry's input) and the entries waiting in the
lag. Grammar state is not part of it: snapshots are taken of prompts, and a grammar
starts with each generation.

Restoring a snapshot makes the contexts hold exactly the bytes that were saved, so what
follows is bit-for-bit what followed when it was taken (and, in exact mode, what decoding
the whole prompt from scratch gives: batch-invariant arithmetic makes the split points
irrelevant).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from engine.runtime.decode.session import HOLE, Session


def token_key(tokens: np.ndarray) -> bytes:
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


def take(session: Session) -> Snapshot:
    """The session's state now. Raises MemoryError when host memory cannot hold it."""
    tokens = np.asarray(session.target_tokens, np.int32)
    draft = session.draft.state_get() if session.draft is not None else None
    lag = session.lag
    return Snapshot(
        tokens=tokens,
        target=session.target.state_get(),
        draft=draft,
        draft_tokens=tuple(session.draft_tokens) if session.draft is not None else (),
        last_hidden=None if session.last_hidden is None else session.last_hidden.copy(),
        lag_tokens=tuple(lag.tokens),
        lag_hidden=np.stack(lag.hidden) if lag.hidden else None,
        key=token_key(tokens),
    )


def restore(session: Session, snap: Snapshot) -> None:
    """Make the session hold ``snap``'s state. Raises ContextError (the session then holds
    nothing: empty contexts) when llama.cpp refuses the bytes."""
    try:
        session.target.state_set(snap.target)
        if session.draft is not None:
            if snap.draft is not None:
                session.draft.state_set(snap.draft)
                session.draft_tokens = list(snap.draft_tokens)
            else:  # no MTP entries were kept: the head goes on with holes up to here
                session.draft.clear()
                session.draft_tokens = [HOLE] * (snap.n if snap.last_hidden is not None else snap.n + 1)
    except Exception:
        session.reset()
        raise
    session.target_tokens = snap.tokens.tolist()
    session.last_hidden = None if snap.last_hidden is None else snap.last_hidden.copy()
    session.lag.clear()
    session.fed.clear()
    if snap.lag_tokens and session.draft is not None and snap.draft is not None:
        assert snap.lag_hidden is not None
        session.lag.extend(list(snap.lag_tokens), snap.lag_hidden.copy())
