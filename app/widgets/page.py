"""The header every page starts with: its title, and what sits beside or under it."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget


def page_layout(page: QWidget, title: str, *, intro: str | None = None, aside: QWidget | None = None) -> QVBoxLayout:
    """Give ``page`` (styled as a ``Page``) its vertical layout, starting with the header:
    the title (``PageTitle``), ``aside`` at the right end of the title's row, and
    ``intro`` (a wrapped ``Hint``) under it. The page adds its body to the layout returned."""
    page.setObjectName("Page")
    lay = QVBoxLayout(page)
    lay.setContentsMargins(16, 12, 16, 8)
    heading = QLabel(title)
    heading.setObjectName("PageTitle")
    if aside is None:
        lay.addWidget(heading)
    else:
        row = QHBoxLayout()
        row.addWidget(heading)
        row.addStretch(1)
        row.addWidget(aside)
        lay.addLayout(row)
    if intro:
        hint = QLabel(intro)
        hint.setObjectName("Hint")
        hint.setWordWrap(True)
        lay.addWidget(hint)
    return lay
