"""Token streams for training and evaluation, cut into fixed-length windows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from engine.fileio import write_atomic
from training.corpus import EOT, Document

#: how many times each source is repeated in the training stream (chat is rare in the
#: corpus; the demo should still answer in chat format)
WEIGHTS = {"stdlib-source": 1, "stdlib-docstrings": 2, "house-chat": 16}


def token_stream(docs: list[Document], tokenizer, *, held_out: bool, seed: int) -> np.ndarray:
    """Documents of one split, repeated by :data:`WEIGHTS`, in an order fixed by ``seed``,
    each followed by ``<|endoftext|>``."""
    chosen = [d for d in docs if d.held_out == held_out for _ in range(1 if held_out else WEIGHTS[d.source])]
    random.Random(seed).shuffle(chosen)
    eot = tokenizer.token_to_id(EOT)
    ids: list[int] = []
    for enc in tokenizer.encode_batch([d.text for d in chosen]):
        ids.extend(enc.ids)
        ids.append(eot)
    return np.asarray(ids, dtype=np.int32)


class Windows:
    """Random windows of ``length`` tokens from a stream; the sampler's state is part of a
    checkpoint, so a resumed run draws the same batches as an uninterrupted one."""

    def __init__(self, stream: np.ndarray, length: int, seed: int):
        if len(stream) <= length:
            raise ValueError(f"the token stream ({len(stream)} tokens) is shorter than one window ({length})")
        self.stream = stream
        self.length = length
        self.rng = np.random.default_rng(seed)

    def batch(self, n: int) -> np.ndarray:
        starts = self.rng.integers(0, len(self.stream) - self.length, size=n)
        return np.stack([self.stream[s : s + self.length] for s in starts]).astype(np.int64)

    def state(self) -> dict:
        return self.rng.bit_generator.state

    def restore(self, state: dict) -> None:
        self.rng.bit_generator.state = state


def eval_windows(stream: np.ndarray, length: int, limit: int) -> np.ndarray:
    """Consecutive, non-overlapping windows from the start of the held-out stream."""
    n = min(limit, len(stream) // length)
    return stream[: n * length].reshape(n, length).astype(np.int64)


def save_json(path: Path, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1) + "\n")
