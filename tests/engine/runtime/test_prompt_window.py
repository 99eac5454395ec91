"""The MTP head's prompt window (engine.runtime.decode.session.MTP_PROMPT_WINDOW): a long
prompt's MTP entries before its last positions are not fed. The output is plain decoding's
whatever the window, the MTP context holds only the window, drafts go on being accepted,
and a later turn feeds only what is new."""

from __future__ import annotations

import pytest

from engine.runtime.decode.entries import HOLE
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.session import MTP_PROMPT_WINDOW
from engine.runtime.load.loader import LoadSpec, MtpSource, load


@pytest.fixture(scope="module")
def lms(fixtures):
    out = {
        name: load(LoadSpec(fixtures[name].path, mtp=MtpSource.INTEGRATED, n_ctx=1024, probe=False, fit="off"))
        for name in ("full", "partial")
    }
    yield out
    for lm in out.values():
        lm.close()


def _gen(lm, prompt, window, depth=2, n=48, reset=True):
    s = lm.session
    if reset:
        s.reset()
    s.prompt_window = window
    try:
        return generate(
            s, prompt, DecodeParams(max_tokens=n, ignore_eog=True, depth=FixedDepth(depth) if depth else None)
        )
    finally:
        s.prompt_window = MTP_PROMPT_WINDOW


def _prompt(lm, words=120):
    return lm.model.prompt_tokens(" ".join(f"w{i % 37} and {i % 11}" for i in range(words)))


@pytest.mark.parametrize("name", ["full", "partial"])
def test_a_windowed_prompt_changes_nothing_but_what_the_head_sees(lms, name):
    lm = lms[name]
    prompt = _prompt(lm)
    assert len(prompt) > 200
    plain = _gen(lm, prompt, MTP_PROMPT_WINDOW, depth=0).tokens
    whole = _gen(lm, prompt, MTP_PROMPT_WINDOW)
    windowed = _gen(lm, prompt, 32)
    assert whole.tokens == plain and windowed.tokens == plain
    s = lm.session
    # entries before the window were never fed: holes; the window's are all there
    before = len(prompt) - 32
    assert set(s.draft_tokens[:before]) == {HOLE}
    assert HOLE not in s.draft_tokens[before : len(prompt)]
    assert windowed.stats.drafted > 0
    if name == "full":  # the head drafts from the target's hidden state: still all accepted
        assert windowed.stats.accepted == windowed.stats.drafted == whole.stats.drafted


def test_a_later_turn_feeds_only_its_new_part(lms):
    lm = lms["partial"]
    prompt = _prompt(lm, 60)
    first = _gen(lm, prompt, 32)
    turn2 = prompt + first.tokens + _prompt(lm, 40)[1:]
    again = _gen(lm, turn2, 32, reset=False)  # reuses the first turn's contexts
    assert again.stats.prompt_tokens_reused > len(prompt)
    s = lm.session
    new_part = len(turn2) - again.stats.prompt_tokens_reused
    assert new_part > 32  # so the window cut the new part too
    assert set(s.draft_tokens[len(prompt) + len(first.tokens) : len(turn2) - 32]) == {HOLE}
    assert HOLE not in s.draft_tokens[len(turn2) - 32 : len(turn2)]
    assert again.tokens == _gen(lm, turn2, 32, depth=0).tokens


def test_the_window_keeps_the_heads_share_of_a_prompt_small(lms):
    """The fixture's head is one block beside four trunk blocks: a large share of the model,
    so its window is a fraction of a short prompt's; long prompts get the full window."""
    s = lms["full"].session
    model = s.target.model
    trunk = model.n_layer  # the trunk's blocks (llama.cpp counts the NextN block apart)
    assert trunk == 4 and model.n_layer_nextn == 1
    from engine.runtime.decode.session import MIN_PROMPT_WINDOW, MTP_PROMPT_SHARE

    assert s.window(100) == MIN_PROMPT_WINDOW  # never below the floor
    assert s.window(4000) == int(4000 * MTP_PROMPT_SHARE * trunk) < 4000 // 2
    assert s.window(100_000) == MTP_PROMPT_WINDOW
    s.prompt_window = 32
    try:
        assert s.window(4000) == 32  # a smaller cap wins over the floor
    finally:
        s.prompt_window = MTP_PROMPT_WINDOW
