"""The ``mtp-studio`` command line: one module per command group, registered here.

Headless commands never import Qt. ``mtp-studio`` with no command opens the desktop app
(see :mod:`app.launcher`, the console-script entry point, which dispatches here).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# command group module -> the commands it registers
COMMAND_MODULES = (
    "engine.cli.generate",
    "engine.cli.gguf",
    "engine.cli.bench",
    "engine.cli.serve",
    "engine.cli.backend",
    "engine.cli.rpc",
    "engine.cli.hub",
    "engine.cli.paths",
)

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with the message on stderr
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mtp-studio", description="Run local LLMs fast with native MTP speculative decoding.")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log debug output (including llama.cpp's) to stderr"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"] and len(argv) >= 2:  # frozen app: run a module in a child
        return importlib.import_module(argv[1]).main(argv[2:])
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return int(args.func(args) or 0)


def die(message: str, code: int = EXIT_INVALID) -> int:
    print(f"mtp-studio: {message}", file=sys.stderr)
    return code
