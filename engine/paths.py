"""Where MTP Studio keeps things: every path comes from platformdirs.

``MTP_STUDIO_HOME`` puts everything under one folder instead (portable installs,
tests). The frozen app uses the same paths as a source install and never writes inside
its own folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "mtp-studio"
APP_AUTHOR = "MTP Studio"


def _home() -> Path | None:
    v = os.environ.get("MTP_STUDIO_HOME")
    return Path(v) if v else None


def _dir(kind: str) -> Path:
    home = _home()
    if home is not None:
        p = home / kind
    else:
        p = Path(getattr(platformdirs, f"user_{kind}_dir")(APP_NAME, APP_AUTHOR))
    return p


def data_dir() -> Path:
    return _dir("data")


def config_dir() -> Path:
    return _dir("config")


def cache_dir() -> Path:
    return _dir("cache")


def log_dir() -> Path:
    return _dir("log")


def models_dir() -> Path:
    """The model library (downloads, imports, composites)."""
    return data_dir() / "models"


def backends_dir() -> Path:
    """Per-build folders of llama-cpp-python backends."""
    return data_dir() / "backends"


def ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
