"""Endpoint processes for the benchmarks: this app's ``serve`` or llama-server, started on a
free port and waited for until it answers ``/health``.

The one place the harness starts a server it measures (``bench slots``, ``bench agent``,
:mod:`benchmarks.serving.ondemand`, :mod:`benchmarks.serving.agent_apis`, :mod:`benchmarks.serving.versus_server`).
A server runs in a process of its own: clients in the benchmark's process must not share an
interpreter with the server they measure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.rpc.server import free_port
from engine.runtime.llama import repack

#: most seconds a server takes to load its model and answer /health
READY_S = 300.0


class ServerError(RuntimeError):
    """A server process exited before it answered, or did not answer in time."""


class ServerProcess:
    """One endpoint process on a free port of 127.0.0.1, ready when made; :meth:`stop` (or
    leaving a ``with`` block) ends it. ``argv`` is the command without ``--port``."""

    def __init__(self, argv: Sequence[str], *, name: str | None = None, ready_s: float = READY_S):
        self.name = name or Path(argv[0]).name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # its stderr, for the message when it exits before it answers (a pipe nobody reads
        # could fill up and stall it)
        self._log = tempfile.TemporaryFile()
        env = dict(os.environ, GGML_NO_BACKTRACE="1")
        self.proc = subprocess.Popen(
            [*argv, "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=self._log, env=env
        )
        try:
            self._wait(ready_s)
        except BaseException:
            self.stop()
            raise

    @classmethod
    def ours(cls, model: Path, args: Sequence[str] = (), **kw) -> ServerProcess:
        """This app's ``serve`` on ``model`` with ``args``, from this interpreter."""
        return cls(
            [sys.executable, "-m", "app.launcher", "serve", "--model", str(model), *args], name="mtp-studio serve", **kw
        )

    @classmethod
    def llama_server(
        cls, binary: str, model: Path, args: Sequence[str] = (), threads: int | None = None, **kw
    ) -> ServerProcess:
        """llama-server on ``model`` (``threads``: ``-t``; None: its own default), with weight
        repacking as ours has it on this machine (like with like; and where this CPU's
        repacked kernels crash, llama-server dies with them on its first request unless
        started with ``--no-repack``)."""
        cmd = [binary, "-m", str(model), "--host", "127.0.0.1"]
        if threads is not None:
            cmd += ["-t", str(threads)]
        return cls([*cmd, "--no-webui", *repack.llama_server_args(), *args], name="llama-server", **kw)

    def _wait(self, ready_s: float) -> None:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode}: {self._stderr_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:  # not listening yet, or 503 while it loads
                pass
            time.sleep(0.3)
        raise ServerError(f"{self.name} did not answer {self.url}/health within {ready_s:.0f} s")

    def _stderr_tail(self, chars: int = 2000) -> str:
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-chars:].strip()

    def model_name(self) -> str:
        """The id of the (first) model the server lists."""
        with urllib.request.urlopen(self.url + "/v1/models", timeout=10) as r:
            return json.load(r)["data"][0]["id"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def timed_stream(
    client, url: str, body: dict, text: Callable[[dict], str | None]
) -> tuple[int, float | None, float | None]:
    """POST ``body`` to ``url`` (an OpenAI-style streamed completion) on ``client`` (an
    httpx client) and read it to its end: the completion tokens its usage reports, and
    when (``time.perf_counter``) the first and last chunks carrying text arrived (None:
    none did). ``text`` reads a choice's text (``delta.content``, or ``text``)."""
    first = last = None
    tokens = 0
    with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"].get("completion_tokens", tokens)
            if any(text(ch) for ch in chunk.get("choices") or []):
                last = time.perf_counter()
                first = first if first is not None else last
    return tokens, first, last


def find_llama_server(given: str | None) -> str | None:
    """The llama-server binary: ``given``, else the one on PATH, else None (its arms are skipped)."""
    return given or shutil.which("llama-server")


def add_llama_server_args(p) -> None:
    """The options of a benchmark that also measures llama-server (bench slots, bench agent)."""
    p.add_argument(
        "--llama-server",
        default=None,
        metavar="PATH",
        help="llama-server binary (built from the vendored llama.cpp); default: on PATH, else skipped",
    )
    p.add_argument("--llama-mtp-depth", type=int, default=3, help="llama-server's --spec-draft-n-max (default 3)")
