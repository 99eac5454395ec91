"""The child side of :mod:`engine.runtime.worker`: an engine process for one model.

Reads frames from stdin — ``("load", spec, cache_bytes)``, ``("run", job, cache_bytes)``,
``("cancel",)``, ``("exit",)`` — and answers on the original stdout with
``("event", ev)``, ``("done", result, cancelled, cache_info)`` or
``("failed", class, code, message)``. ``cache_bytes`` is the prompt-cache budget the
parent has now (applied before the job); ``cache_info`` the child's prompt-cache figures
after it, which the parent reports as its own. llama.cpp's own
prints go to stderr (fd 1 is moved there first), where the parent keeps the last lines
to explain a crash.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import replace

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.worker import _EOF, error_frame, recv_frame, send_frame


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # C code printing to stdout must not corrupt the frames
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    lock = threading.Lock()

    def send(obj) -> None:
        with lock:
            send_frame(out, obj)

    def on_event(ev) -> None:
        if isinstance(ev, J.Done):
            send(("done", ev.result, ev.cancelled, engine.prompt_cache_info()))
        elif isinstance(ev, J.Failed):
            send(error_frame(ev.error))
        elif not isinstance(ev, J.Started):
            send(("event", ev))

    engine = Engine(EngineConfig(isolate_rpc=False)).start()
    current = None
    try:
        while True:
            msg = recv_frame(inp)
            if msg is _EOF or msg[0] == "exit":
                break
            kind = msg[0]
            try:
                if kind in ("load", "run"):
                    engine.set_prompt_cache_bytes(msg[2])
                if kind == "load":
                    spec = replace(msg[1], probe=False)  # this process is the isolation the probe would give
                    current = engine.submit(J.LoadModel(spec), on_event=on_event)
                elif kind == "run":
                    # the parent resolved the job and filters its events: relay every one
                    job = msg[1]
                    current = engine.submit(
                        replace(job, rounds=True) if isinstance(job, J.Generate) else job, on_event=on_event
                    )
                elif kind == "cancel" and current is not None:
                    current.cancel()
            except Exception as e:  # refused before it ran (queue full, engine stopping)
                send(error_frame(e))
    finally:
        engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
