"""llama.cpp objects collected unclosed are freed on the thread that made them."""

from __future__ import annotations

import gc
import queue
import threading

from engine.runtime.llama import owned
from engine.runtime.llama.batch import Batch


def test_a_batch_dropped_on_another_thread_is_freed_by_its_owner():
    made: queue.Queue = queue.Queue()
    go, done = threading.Event(), queue.Queue()

    def owner():
        made.put(Batch(8))
        go.wait(30)
        done.put(owned.reap())

    t = threading.Thread(target=owner)
    t.start()
    batch = made.get(timeout=30)
    gc.collect()  # what earlier tests left for the collector is queued now, not counted below
    before = owned.pending()
    del batch
    gc.collect()
    assert owned.pending() == before + 1  # queued, not freed here
    assert owned.reap() == 0  # this thread does not own it
    go.set()
    t.join(30)
    assert done.get(timeout=1) == 1 and owned.pending() == before


def test_a_batch_dropped_on_its_own_thread_is_freed_at_once():
    before = owned.pending()
    b = Batch(4)
    del b
    gc.collect()
    assert owned.pending() == before


def test_contexts_are_freed_before_models():
    order = []

    class Fake(owned.Owned):
        def __init__(self, name, prio):
            self._own()
            self.name, self._free_priority = name, prio

        def close(self):
            pass

        def _closer(self):
            return lambda: order.append(self.name)

    made: queue.Queue = queue.Queue()
    go = threading.Event()

    def owner():
        made.put([Fake("model", 1), Fake("context", 0)])
        go.wait(30)
        owned.reap()

    t = threading.Thread(target=owner)
    t.start()
    objs = made.get(timeout=30)
    del objs
    gc.collect()
    go.set()
    t.join(30)
    assert order == ["context", "model"]
