"""Render resources/icon.svg to icon.png (256 px, Linux and macOS packages) and
icon.ico (Windows). Run after changing the SVG: ``python -m tools.make_icons``."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

from engine.synth.demo import resources_dir  # noqa: E402


def render(size: int) -> QImage:
    img = QImage(size, size, QImage.Format.Format_ARGB32)
    img.fill(Qt.GlobalColor.transparent)
    painter = QPainter(img)
    QSvgRenderer(str(resources_dir() / "icon.svg")).render(painter)
    painter.end()
    return img


def main() -> int:
    _app = QGuiApplication([])
    out = resources_dir()
    assert render(256).save(str(out / "icon.png"))
    assert render(256).save(str(out / "icon.ico"))
    print(f"wrote {out / 'icon.png'} and {out / 'icon.ico'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
