"""The command line and the self-test, for the launcher (app.launcher) that runs either in
place of the window."""

from __future__ import annotations

from engine.cli import main as cli_main
from engine.selftest import main as self_test

__all__ = ["cli_main", "self_test"]
