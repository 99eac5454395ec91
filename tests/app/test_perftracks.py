"""The Performance page's record of the generations it follows (app.pages.perftracks):
each on its own, and all together on one clock."""

from __future__ import annotations

import pytest

from app.pages.perftracks import KEEP_ENDED, Tracks
from engine.facade import GenerationStats
from engine.runtime.decode.stats import RoundStats


def rounds(n: int, *, every: float, drafted: int = 2, accepted: int = 1) -> list[RoundStats]:
    return [
        RoundStats(
            index=i,
            depth=drafted,
            drafted=drafted,
            accepted=accepted,
            emitted=accepted + 1,
            draft_settle_ms=0.1,
            verify_ms=0.5,
            t=(i + 1) * every,
        )
        for i in range(n)
    ]


def test_a_second_request_adds_to_the_aggregate_instead_of_restarting_it():
    tracks = Tracks()
    tracks.start(1, "request 1", 0.0, mtp_on=True)
    tracks.add(1, rounds(50, every=0.01))
    before = tracks.view()
    assert before.running == 1 and before.emitted == 100 and len(before.tps) > 10
    tracks.start(2, "request 2", 0.5, mtp_on=True)
    tracks.add(2, rounds(50, every=0.01, drafted=3, accepted=0))
    both = tracks.view()
    assert both.running == 2 and both.emitted == 100 + 50
    assert both.tps[: len(before.tps)] == before.tps  # what was drawn stays
    assert both.stats.drafted == 50 * 2 + 50 * 3 and both.stats.accepted == 50
    # each on its own: its own figures over its own time
    one, two = tracks.view(1), tracks.view(2)
    assert (one.emitted, two.emitted) == (100, 50)
    assert one.stats.acceptance == 0.5 and two.stats.acceptance == 0.0
    assert two.tps[0][0] < 0.5  # its own clock, from its start


def test_an_ended_request_keeps_its_final_figures_and_old_ones_are_let_go():
    tracks = Tracks()
    tracks.start(1, "request 1", 0.0, mtp_on=False)
    tracks.add(1, rounds(5, every=0.01))
    final = GenerationStats(generated=10, generation_ms=20.0)
    tracks.finish(1, final)
    assert tracks.view(1).stats is final and tracks.view(1).running == 0 and tracks.view().running == 0
    for jid in range(2, 2 + KEEP_ENDED + 3):
        tracks.start(jid, f"request {jid}", 1.0, mtp_on=False)
        tracks.finish(jid, None)
    assert len(tracks.tracks) == KEEP_ENDED + 1  # the ended ones kept, and the newest
    assert 1 not in tracks.tracks


def test_the_aggregate_drops_to_zero_while_nothing_decodes():
    """Between one request's end and the next one's start the aggregate's rate is 0, not a
    line drawn across the gap."""
    tracks = Tracks()
    tracks.start(1, "request 1", 0.0, mtp_on=True)
    tracks.add(1, rounds(20, every=0.01))
    tracks.finish(1, None)
    tracks.start(2, "request 2", 5.0, mtp_on=True)
    tracks.add(2, rounds(20, every=0.01))
    tps = tracks.view().tps
    i = next(i for i, (_, v) in enumerate(tps) if v == 0.0)  # the first end of decoding
    assert tps[i][0] == pytest.approx(0.2) and tps[i + 1] == (5.0, 0.0)  # flat at 0 until the next start
    assert max(v for t, v in tps if t > 5.0) < 1000  # the new window does not count the old rounds
