"""Paths of the app's bundled resources (source checkout or frozen app) and the icon."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from PySide6.QtGui import QIcon

from engine.facade import resources_dir


def resource(name: str) -> Path:
    return resources_dir() / name


@lru_cache(maxsize=1)
def app_icon() -> QIcon:
    icon = QIcon()
    for name in ("icon.svg", "icon.png"):
        p = resource(name)
        if p.exists():
            icon.addFile(str(p))
    return icon


def style_sheet() -> str:
    p = resource("style.qss")
    return p.read_text(encoding="utf-8") if p.exists() else ""
