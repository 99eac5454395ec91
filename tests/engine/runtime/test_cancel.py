"""A cancel at any phase leaves the contexts holding exactly the emitted tokens, and the
next turn of the conversation continues exactly as an undisturbed run would."""

from __future__ import annotations

import threading

import pytest

from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams

from engine.runtime.decode.policy.base import FixedDepth
from tests.engine.runtime.helpers import load_fixture

PROMPT = "The quick brown fox jumps over the lazy dog. " * 3
FOLLOW_UP = " And then? Tell me more."


@pytest.fixture(scope="module")
def models(fixtures):
    # a small batch makes the prompt prefill take several chunks (a cancel point between)
    spec = load_fixture(fixtures["partial"], "integrated", n_batch=8)
    plain = load_fixture(fixtures["partial"], "off", n_batch=8)
    yield spec, plain
    spec.close()
    plain.close()


def _cancel_at(session, phase: str, occurrence: int) -> threading.Event:
    cancel = threading.Event()
    seen = {"n": 0}

    def hook(name: str) -> None:
        if name == phase:
            seen["n"] += 1
            if seen["n"] == occurrence:
                cancel.set()

    session.phase_hook = hook
    return cancel


CASES = [
    ("prefill", 1, True),
    ("prefill", 3, True),
    ("draft", 1, True),
    ("draft", 4, True),  # between chained draft steps
    ("verify", 1, True),
    ("verify", 5, True),
    ("commit", 1, True),
    ("commit", 6, True),
    ("prefill", 2, False),
    ("decode", 1, False),
    ("decode", 7, False),
]


@pytest.mark.parametrize("phase,occurrence,speculative", CASES)
def test_cancel_then_next_turn_matches_undisturbed_run(models, phase, occurrence, speculative):
    spec, plain = models
    lm = spec if speculative else plain
    s = lm.session
    s.reset()
    model = lm.model
    prompt = model.tokenize(PROMPT)
    depth = FixedDepth(3) if speculative else None
    cancel = _cancel_at(s, phase, occurrence)
    try:
        g = generate(s, prompt, DecodeParams(max_tokens=40, depth=depth), cancel=cancel)
    finally:
        s.phase_hook = None
    assert cancel.is_set(), f"phase {phase!r} #{occurrence} never happened"
    assert g.stop_reason == "cancelled"
    assert len(g.tokens) < 40

    # The target holds exactly a prefix of prompt + emitted tokens: all of the prompt
    # once any token was emitted, and every emitted token but possibly the last.
    history = prompt + g.tokens
    held = s.target_tokens
    assert held == history[: len(held)]
    if g.tokens:
        assert len(held) >= len(history) - 1
    if speculative:
        # MTP entries (fed, or waiting in the lag) follow the same history; the last one
        # may be for the token after it (computed, not emitted)
        entries = s.draft_tokens + s.lag.tokens
        assert entries[:-1] == history[: len(entries) - 1]
        assert len(entries) <= len(held) + 1

    # Next turn in the same (cancelled) session vs a fresh session.
    turn2 = history + model.tokenize(FOLLOW_UP)
    got = generate(s, turn2, DecodeParams(max_tokens=32, depth=FixedDepth(3)))
    plain.session.reset()
    want = generate(plain.session, turn2, DecodeParams(max_tokens=32))
    assert got.tokens == want.tokens
    if g.tokens:
        assert got.stats.prompt_tokens_reused >= len(history) - 1  # the cancelled turn's cache was reused
