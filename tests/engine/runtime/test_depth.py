"""DraftDepth: the one parser of a requested draft depth."""

from __future__ import annotations

import pytest

from engine.errors import InvalidRequestError
from engine.runtime.decode.depth import AUTO, DraftDepth


@pytest.mark.parametrize("value,fixed", [(1, 1), (8, 8), ("3", 3), (" 4 ", 4), ("auto", None), (DraftDepth(2), 2)])
def test_parses_what_every_front_end_sends(value, fixed):
    d = DraftDepth.parse(value)
    assert d.fixed == fixed and d.is_auto == (fixed is None)


@pytest.mark.parametrize("value", [0, -1, True, False, 2.0, "0", "x", "", "AUTO", None, [3]])
def test_refuses_everything_else_with_one_message(value):
    with pytest.raises(InvalidRequestError, match="integer >= 1 or 'auto'"):
        DraftDepth.parse(value)


def test_round_trips_through_json_and_text():
    for d in (AUTO, DraftDepth(5)):
        assert DraftDepth.parse(d.to_json()) == d and DraftDepth.parse(str(d)) == d
    assert AUTO.deepest(6) == 6 and DraftDepth(3).deepest(6) == 3


def test_a_load_is_sized_for_the_setting_or_a_deeper_fixed_depth():
    assert AUTO.load_depth(4) == 4  # auto drafts within the setting
    assert DraftDepth(2).load_depth(4) == 4
    assert DraftDepth(7).load_depth(4) == 7
