"""How deep to draft each round: the :class:`DepthPolicy` interface and the fixed policy.

The adaptive policy (``auto``) is :class:`~engine.runtime.decode.policy.adaptive.AdaptiveDepth`.
A policy carries the :class:`~engine.runtime.decode.depth.DraftDepth` it stands for, so
statistics report what was asked for without parsing a name back.
"""

from __future__ import annotations

from typing import Protocol

from engine.runtime.decode.depth import DraftDepth
from engine.runtime.decode.stats import RoundStats


class DepthPolicy(Protocol):
    """Chooses the draft depth of each round (0 = no drafting)."""

    #: the request's depth this policy serves (a fixed K, or auto)
    draft_depth: DraftDepth
    max_depth: int
    #: learns from the rounds it observes (saved after a run: decode.policy.store)
    learns: bool

    def next_depth(self) -> int: ...

    def observe(self, r: RoundStats) -> None: ...

    @property
    def idle(self) -> bool:
        """Drafting is off and will not resume before a probe: the prompt's MTP entries
        can wait in the lag (only the newest are ever fed) instead of being fed now."""
        ...


class FixedDepth:
    """Always ``depth`` drafts per round."""

    learns = False

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError("draft depth must be >= 1")
        self.depth = depth
        self.max_depth = depth
        self.draft_depth = DraftDepth(depth)

    def next_depth(self) -> int:
        return self.depth

    def observe(self, r: RoundStats) -> None:
        pass

    @property
    def idle(self) -> bool:
        return False


class NoHead:
    """The depth policy of a generation without an MTP head to draft with (a model that
    has none, or a request with MTP off) whose rounds may still take suffix drafts:
    never a chain."""

    learns = False
    max_depth = 0
    idle = False

    def next_depth(self) -> int:
        return 0

    def observe(self, r: RoundStats) -> None:
        pass


NO_HEAD = NoHead()
