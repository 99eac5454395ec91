"""The benchmarks harness: programs that print figures about MTP Studio. Not tests, and not
part of the product.

They measure the engine against llama-server and llama-cpp-python, the endpoint under
concurrent HTTP clients, in processes of their own; each runs from a source checkout as
``python -m benchmarks.GROUP.NAME``, and the ones the command line names also as ``mtp-studio
bench NAME`` (a thin entry: :mod:`engine.cli.benchharness`). The groups: :mod:`benchmarks.serving`
(the endpoint under load), :mod:`benchmarks.decoding` (the decode, in process),
:mod:`benchmarks.models` (getting a model ready: memory, compose, downloads, RPC); the GUI's
start-up and stalls are :mod:`benchmarks.gui`. The frozen app leaves this
package out (packaging/mtp-studio.spec) and the engine never imports it (the import
contracts in pyproject.toml). :mod:`benchmarks.serving.servers` is the one place that starts an
endpoint process and waits until it answers. docs/benchmarks.md lists every benchmark.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the source checkout this package lives in
ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child that imports the harness: the checkout first
    on PYTHONPATH (``mtp-studio bench`` runs from any folder), llama.cpp's backtraces off."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "GGML_NO_BACKTRACE": "1", "PYTHONPATH": path, **extra}
