"""The copier's chunk size follows the disk: large calls on a fast one, calls of about
CHUNK_SECONDS on a slow one, so progress and cancel stay responsive."""

from __future__ import annotations

import os

from engine.gguf.filecopy import CHUNK_MAX, CHUNK_MIN, CHUNK_SECONDS, Copier


def test_chunks_grow_on_a_fast_disk_and_stay_small_on_a_slow_one():
    fast = Copier(1 << 40)
    fast._resize(CHUNK_MIN, 0.01)  # 6.4 GB/s
    assert fast.chunk == CHUNK_MAX
    slow = Copier(1 << 40)
    slow._resize(CHUNK_MIN, 2.0)  # 32 MB/s
    assert slow.chunk == CHUNK_MIN
    mid = Copier(1 << 40)
    mid._resize(CHUNK_MIN, 0.1)  # 640 MiB/s: a call of CHUNK_SECONDS
    assert mid.chunk == int(CHUNK_MIN / 0.1 * CHUNK_SECONDS) & ~((1 << 20) - 1)
    mid._resize(1 << 20, 0.001)  # a short tail call says nothing about the disk
    assert mid.chunk == int(CHUNK_MIN / 0.1 * CHUNK_SECONDS) & ~((1 << 20) - 1)


def test_copy_is_exact_across_chunk_sizes(tmp_path):
    src = tmp_path / "src.bin"
    data = os.urandom(3 << 20) + bytes(range(256)) * 7
    src.write_bytes(data)
    ticks = []
    c = Copier(len(data) - 100, progress=lambda done, total: ticks.append(done))
    c.chunk = 1 << 20  # a first call of 1 MiB, then the chunk grows and takes the rest
    fd_in = os.open(src, os.O_RDONLY)
    fd_out = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT)
    try:
        c.copy(fd_in, 100, fd_out, len(data) - 100)
    finally:
        os.close(fd_in)
        os.close(fd_out)
    assert (tmp_path / "out.bin").read_bytes() == data[100:]
    assert ticks == sorted(ticks) and ticks[-1] == len(data) - 100
