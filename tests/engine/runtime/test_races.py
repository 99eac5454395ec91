"""Objects several threads share (the ownership table in engine/runtime/engine.py): each of
these failed before its fix — two sequences detokenizing new tokens at once, two auto
requests right after a load, a conversation's tokens read while another turn is remembered,
a slot pool read while a reservation is bound to its slot."""

from __future__ import annotations

import random
import sys
import threading

import pytest

from engine.runtime.decode.depth import DraftDepth
from engine.runtime.llama.model import Model
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.decode.policy.store import depth_policy
from engine.synth.demo import demo_model_path


@pytest.fixture
def fast_switching():
    """Hand the GIL over as often as possible, so interleavings that are rare come at once."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _together(n: int, fn) -> list:
    """Run ``fn(i)`` on ``n`` threads released at once; their results, in order."""
    barrier = threading.Barrier(n)
    out: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


def test_threads_detokenizing_new_tokens_at_once_each_see_their_own_text(fast_switching):
    """Model.piece filled one buffer shared by every thread, through a call that releases
    the GIL, and cached what it read for the model's life: one sequence's text could show
    another's token, forever after."""
    ref = Model.load(demo_model_path(), load_mtp=True, metadata_only=True)
    try:
        expected = [ref.piece(t) for t in range(ref.n_vocab)]
    finally:
        ref.close()
    for trial in range(3):
        m = Model.load(demo_model_path(), load_mtp=True, metadata_only=True)
        try:
            orders = [random.Random(trial * 10 + i).sample(range(m.n_vocab), m.n_vocab) for i in range(6)]
            _together(6, lambda i: [m.piece(t) for t in orders[i]])
            wrong = [t for t in range(m.n_vocab) if m.piece(t) != expected[t]]
            assert not wrong, f"trial {trial}: {len(wrong)} tokens cached with another token's text, e.g. {wrong[:5]}"
        finally:
            m.close()


def test_auto_requests_right_after_a_load_share_one_policy(fixtures, tmp_path, monkeypatch):
    """The model's auto policy was made lazily on the slots' threads without a lock: two
    requests after a load each made one, and the step's policy was replaced back and forth."""
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    auto = DraftDepth.parse("auto")
    for _ in range(3):
        lm = load(LoadSpec(fixtures["partial"].path, mtp=MtpSource.INTEGRATED, n_ctx=256, probe=False, fit="off"))
        try:
            policies = _together(8, lambda _i: depth_policy(lm, auto))
            assert len({id(p) for p in policies}) == 1 and lm.auto_policy is policies[0]
        finally:
            lm.close()


def test_conversations_remembered_at_once_are_all_remembered(fast_switching):
    """TokenizedTexts (a model's recent conversations, whose tokens the next turn reuses)
    was shared unlocked: requests ending at once each rebuilt the list from what they
    read, and conversations were lost, so their next turns tokenized everything again
    (before the lock: 133 of 16,000 lost in 2,000 trials of this)."""
    lost = 0
    for trial in range(300):
        texts = TokenizedTexts(size=16)
        words = [f"conversation {trial}-{i}: " + "x" * 40 for i in range(8)]

        def turns(i: int) -> None:
            for k in range(5):  # each turn supersedes the conversation's last
                text = words[i] + "y" * k
                texts.remember(text, [ord(c) for c in text], "", [])

        _together(8, turns)
        calls: list[str] = []
        for w in words:
            texts.tokenize(w + "yyyy next turn", lambda s: calls.append(s) or [ord(c) for c in s])
        lost += sum(1 for c in calls if c != " next turn")
    assert lost == 0, f"{lost} conversations forgotten"


def test_a_pool_binding_a_reservation_to_a_slot_never_looks_idle():
    """The engine thread reads a pool's busy count without its lock, to choose between
    stepping it and waiting for its next job. Binding a reservation to its slot moved it from
    the promises to the slot's flag in two writes, and read between them the pool looked
    idle: the engine thread went to wait for a job while the sequence arrived, and the
    request never ran (``test_slots`` hung once this way). Read at every line of the bind,
    the pool is busy."""
    lm = load(LoadSpec(demo_model_path(), n_ctx=256, probe=False, fit="off", parallel=2))
    try:
        pool = lm.slots
        reservation = pool.reserve(1)
        seen: list[int] = []

        def each_line(frame, event, arg):
            if event == "line":
                seen.append(pool.busy)
            return each_line

        def tracer(frame, event, arg):  # every line run in the pool's module
            return each_line if frame.f_code.co_filename.endswith("pool.py") else None

        sys.settrace(tracer)
        try:
            reservation.bind([1, 2, 3])
        finally:
            sys.settrace(None)
        assert seen and min(seen) == 1, seen
        reservation.close()
        assert pool.busy == 0
    finally:
        lm.close()
