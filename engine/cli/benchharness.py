"""``mtp-studio bench compose|server|identity|versus|slots|agent|prompt-cache|memory``: thin
entries into the benchmarks harness.

Those benchmarks measure this project (against llama-server and llama-cpp-python, over HTTP,
in processes of their own) and live in the source checkout's top-level ``benchmarks``
package, which the frozen app leaves out (packaging/mtp-studio.spec). Each command here
hands its arguments, unparsed, to its module's ``main``; where the checkout's package is
not beside the engine it says so in one line and exits with the usage status.

The engine never imports the harness statically (an import contract in pyproject.toml):
the module is found by name, with :func:`importlib.import_module`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

#: ``bench`` sub-command -> (the harness module that runs it, its line in ``bench --help``)
HARNESS = {
    "compose": ("benchmarks.models.compose", "compose time vs cp, peak RSS, 262k-vocab header parse time"),
    "prompt-cache": (
        "benchmarks.decoding.prompt_cache",
        "prompt cache: tokens decoded and prompt ms per turn with and without it (chat, two chats, agent)",
    ),
    "images": (
        "benchmarks.decoding.images",
        "a prompt with a picture: time to first token per turn, MTP acceptance after it, vs llama-server --mmproj",
    ),
    "memory": (
        "benchmarks.models.memory",
        "memory estimate vs measured peak memory per model and context (docs/models.md)",
    ),
    "slots": (
        "benchmarks.serving.slots",
        "concurrent clients: aggregate tok/s and per-client time per token, ours vs llama-server",
    ),
    "agent": (
        "benchmarks.serving.agent",
        "agent workloads: plain, MTP auto, suffix drafts, both, vs llama-server; long-prompt time; auto's first tokens",
    ),
    "server": (
        "benchmarks.serving.endpoint_overhead",
        "HTTP endpoint overhead vs in-process, and concurrent throughput",
    ),
    "identity": (
        "benchmarks.decoding.batch_identity",
        "is a row's result independent of its batch? logit noise, argmax flips, MTP vs plain",
    ),
    "versus": (
        "benchmarks.decoding.versus_llama_cpp_python",
        "plain greedy decode tokens/s: this engine vs llama-cpp-python's Llama class",
    ),
}

#: where a source checkout keeps the harness: beside the engine package
CHECKOUT = Path(__file__).parents[2]


def register(bsub) -> None:
    for name, (module, help_line) in HARNESS.items():
        # every argument, options included, goes to the harness's own parser (its --help
        # too): no option of this parser may look like one ("\0" prefixes none)
        p = bsub.add_parser(name, help=help_line, add_help=False, prefix_chars="\0")
        p.add_argument("argv", nargs=argparse.REMAINDER)
        p.set_defaults(func=partial(run, name, module))


def harness_main(module: str) -> Callable[..., int] | None:
    """The ``main`` of harness module ``module``; None where this install has no harness
    (the frozen app, an installed wheel)."""
    if not (CHECKOUT / "benchmarks" / "__init__.py").is_file():
        return None
    if str(CHECKOUT) not in sys.path:  # the console script runs from any folder
        sys.path.insert(0, str(CHECKOUT))
    try:
        return importlib.import_module(module).main
    except ModuleNotFoundError as e:
        if e.name is not None and module.startswith(e.name):  # another "benchmarks" came first
            return None
        raise  # one of the harness's own dependencies: the environment's to fix


def run(name: str, module: str, args) -> int:
    from engine.cli import EXIT_USAGE, die

    main = harness_main(module)
    if main is None:
        return die(
            f"bench {name} is a benchmark of the source checkout and is not part of this build: run it from a "
            "checkout of the project (set up with `make run`)",
            EXIT_USAGE,
        )
    return int(main(args.argv, prog=f"mtp-studio bench {name}") or 0)
