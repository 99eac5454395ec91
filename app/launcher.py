"""The ``mtp-studio`` entry point: the desktop app with no command, the CLI otherwise.

Kept free of Qt imports so headless commands start fast and work without a display.
"""

from __future__ import annotations

import sys

GUI_FLAGS = {"--gui", "--demo"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in GUI_FLAGS or argv[0].startswith("--model=") or argv[0].lower().endswith(".gguf"):
        from app.main import run_gui

        return run_gui(argv)
    if argv[0] == "--self-test":
        from engine.facade.launch import self_test

        return self_test(argv[1:])
    from engine.facade.launch import cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
