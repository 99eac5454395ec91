"""The draft depth a request asks for: a fixed number of drafted tokens per round, or
``auto`` (the adaptive policy). Parsed here and nowhere else — from the command line,
JSON requests, settings and the GUI alike."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import InvalidRequestError

AUTO_TEXT = "auto"


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

    def to_json(self) -> int | str:
        return AUTO_TEXT if self.fixed is None else self.fixed

    def __str__(self) -> str:
        return str(self.to_json())


AUTO = DraftDepth(None)
