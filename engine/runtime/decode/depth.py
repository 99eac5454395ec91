"""What a request says about speculation: whether to use MTP (:class:`Mtp`) and the
draft depth — a fixed number of drafted tokens per round, or ``auto`` (the adaptive
policy). Parsed here and nowhere else — from the command line, JSON requests, settings
and the GUI alike — and carried as these types, never as strings parsed back."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine.errors import InvalidRequestError

AUTO_TEXT = "auto"


class Mtp(enum.StrEnum):
    """Speculation asked for (``ON``: with the model's MTP source, if it has one) or
    used (in statistics)."""

    ON = "on"
    OFF = "off"


@dataclass(frozen=True)
class DraftDepth:
    """``fixed`` tokens drafted per round (>= 1), or ``None`` for auto."""

    fixed: int | None = None

    @classmethod
    def parse(cls, value: object) -> DraftDepth:
        """Accepts a DraftDepth, an int >= 1, a string of one, or ``"auto"``."""
        if isinstance(value, DraftDepth):
            return value
        if value == AUTO_TEXT:
            return AUTO
        k: object = value
        if isinstance(value, str) and value.strip().isdigit():
            k = int(value)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidRequestError(f"draft depth must be an integer >= 1 or 'auto', got {value!r}")
        return cls(k)

    @property
    def is_auto(self) -> bool:
        return self.fixed is None

    def deepest(self, auto_max: int) -> int:
        """The deepest draft this depth may use (``auto_max`` for auto)."""
        return auto_max if self.fixed is None else self.fixed

    def load_depth(self, setting_max: int) -> int:
        """The max draft depth to load a model with when this is the depth to use: the
        ``setting_max`` setting, raised to a fixed depth deeper than it (auto drafts
        within the setting)."""
        return max(setting_max, self.deepest(1))

    def to_json(self) -> int | str:
        return AUTO_TEXT if self.fixed is None else self.fixed

    def __str__(self) -> str:
        return str(self.to_json())


AUTO = DraftDepth(None)
