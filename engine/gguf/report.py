"""What validation finds (:mod:`engine.gguf.validate`): each :class:`Problem`, a file's or
set's :class:`Report`, and what a header says about MTP (:class:`MtpFacts`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Problem:
    code: str
    message: str
    file: str

    def __str__(self) -> str:
        return f"{Path(self.file).name}: {self.message}"


@dataclass
class MtpFacts:
    """What a header says about MTP. ``kind``: none | integrated | head-only |
    trunk-only (NextN layers declared, their tensors in a separate head file) |
    assistant (a drafter architecture of its own, every block a NextN block)."""

    architecture: str | None = None
    block_count: int | None = None
    nextn_layers: int = 0
    trunk_layers: int | None = None
    kind: str = "none"
    arch_supported: bool = False
    #: tensors of its NextN blocks that llama.cpp's MTP graph needs and this file lacks
    #: (the family table's ``nextn_requires``): it loads, but must never draft
    nextn_missing: tuple[str, ...] = ()

    @property
    def has_mtp(self) -> bool:
        return self.nextn_layers > 0


@dataclass
class Report:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    mtp: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def error(self, code: str, message: str, file: str | Path) -> None:
        self.errors.append(Problem(code, message, str(file)))

    def warn(self, code: str, message: str, file: str | Path) -> None:
        self.warnings.append(Problem(code, message, str(file)))

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "errors": [asdict(p) for p in self.errors],
            "warnings": [asdict(p) for p in self.warnings],
            "mtp": self.mtp,
            "files": self.files,
        }
