"""A model that runs in a child engine process (models on remote RPC devices).

llama.cpp's RPC client ends the process when a server goes away mid-call
(``ggml-rpc.cpp``: ``RPC_STATUS_ASSERT`` -> ``GGML_ABORT``). A model with remote devices
therefore never runs in the app's process: the engine thread starts a child
(:mod:`engine.runtime.worker_child`) that runs an ordinary :class:`~engine.runtime.engine.Engine`
with the model, and relays jobs to it and its events back. When the child dies, the job
fails with :class:`~engine.errors.RpcConnectionLostError`, the engine thread carries on,
and the model can be loaded again.

Frames are length-prefixed pickles over the child's stdin/stdout (the child moves
llama.cpp's own stdout onto stderr first). Only the parent starts children, with its own
data, so unpickling is not a trust boundary.
"""

from __future__ import annotations

import logging
import pickle
import queue
import struct
import subprocess
import threading
from collections import deque
from typing import Any, BinaryIO

from engine import errors as E
from engine.childproc import child_env, module_command
from engine.runtime import jobs as J
from engine.runtime.decode.cache.snapshotcache import CacheFigures
from engine.runtime.modelinfo import ModelInfo

log = logging.getLogger(__name__)

CHILD_MODULE = "engine.runtime.worker_child"
_HEADER = struct.Struct("<Q")
_EOF = object()
#: what llama.cpp's RPC client prints before it aborts (ggml-rpc.cpp)
_RPC_ABORTS = ("ggml-rpc", "Remote RPC server", "RPC handshake failed", "Failed to connect")


def encode_frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def send_frame(stream: BinaryIO, obj: Any) -> None:
    stream.write(encode_frame(obj))
    stream.flush()


def recv_frame(stream: BinaryIO) -> Any:
    """The next object, or ``_EOF`` when the other side is gone."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return _EOF
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        return _EOF
    return pickle.loads(data)


def error_frame(e: BaseException) -> tuple:
    code = getattr(e, "code", "internal_error")
    return ("failed", type(e).__name__, code, str(e) or type(e).__name__)


def rebuild_error(name: str, code: str, message: str) -> E.MtpStudioError:
    """The child's error as the same engine error class (same code, same words)."""
    cls = getattr(E, name, None)
    err: E.MtpStudioError
    try:
        err = cls(message) if isinstance(cls, type) and issubclass(cls, E.MtpStudioError) else E.MtpStudioError(message)
    except TypeError:  # a class with required keyword arguments
        err = E.MtpStudioError(message)
    err.code = code
    return err


class WorkerModel:
    """The engine thread's handle on a model in a child process. Used only on the engine
    thread; a reader thread turns the child's frames into a queue."""

    def __init__(self, spec, proc: subprocess.Popen):
        self.spec = spec
        self._proc = proc
        self._frames: queue.SimpleQueue = queue.SimpleQueue()
        self._stderr: deque[str] = deque(maxlen=40)
        self.name = spec.name or ""
        self.info: ModelInfo | None = None  # set once the child has loaded it
        #: why the worker is gone, once it is (raised again for any later job)
        self.lost: E.MtpStudioError | None = None
        #: the worker's prompt-cache figures as of its last job (replaced whole: any thread reads it)
        self._cache_info = CacheFigures()
        threading.Thread(target=self._read, name="mtp-worker-read", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="mtp-worker-log", daemon=True).start()

    # ------------------------------------------------------------------ start
    @classmethod
    def start(
        cls, spec, *, progress=None, cancel: threading.Event | None = None, prompt_cache_bytes: int = 0
    ) -> WorkerModel:
        proc = subprocess.Popen(
            module_command(CHILD_MODULE),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        w = cls(spec, proc)
        try:
            info = w.call(
                ("load", spec, prompt_cache_bytes),
                emit=lambda ev: progress and progress(ev.fraction, ev.message),
                cancel=cancel,
            )
        except BaseException:
            w.close()
            raise
        w.info = info
        w.name = info.name
        return w

    # ------------------------------------------------------------------- jobs
    def run(self, job: J.Generate | J.Call, h, *, prompt_cache_bytes: int) -> Any:
        """Run ``job`` in the child, relaying its events to ``h``, with the prompt-cache
        budget set now (the child applies it before the job)."""
        if isinstance(job, J.Generate) and job.phase_hook is not None:
            raise E.InvalidRequestError("phase hooks cannot run in a worker process")
        return self.call(("run", job, prompt_cache_bytes), emit=h._emit, cancel=h.cancel_event)

    def prompt_cache_info(self) -> CacheFigures:
        """The worker's prompt-cache figures as of its last job (any thread)."""
        return self._cache_info

    def call(self, message: tuple, *, emit, cancel: threading.Event | None) -> Any:
        if self.lost is not None:
            raise type(self.lost)(str(self.lost))
        self._send(message)
        cancel_sent = False
        while True:
            try:
                frame = self._frames.get(timeout=0.1)
            except queue.Empty:
                if cancel is not None and cancel.is_set() and not cancel_sent:
                    self._send(("cancel",))
                    cancel_sent = True
                continue
            if frame is _EOF:
                raise self._died()
            kind = frame[0]
            if kind == "event":
                emit(frame[1])
            elif kind == "done":
                self._cache_info = frame[3]
                if frame[2]:
                    raise E.Cancelled("cancelled in the worker process")
                return frame[1]
            elif kind == "failed":
                raise rebuild_error(*frame[1:])

    # -------------------------------------------------------------- plumbing
    def _send(self, message: tuple) -> None:
        try:
            data = encode_frame(message)
        except Exception:  # a Call whose function is a lambda or closure
            raise E.InvalidRequestError(
                f"{type(message[-1]).__name__} cannot be sent to the worker process that runs this model "
                "(its function is not importable by name)"
            ) from None
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError):  # the pipe is gone with the worker
            raise self._died() from None

    def _read(self) -> None:
        assert self._proc.stdout is not None
        while True:
            try:
                frame = recv_frame(self._proc.stdout)
            except Exception as e:  # a torn frame: the child died mid-write
                log.debug("worker frame unreadable: %s", e)
                frame = _EOF
            self._frames.put(frame)
            if frame is _EOF:
                return

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._stderr.append(line)
                log.debug("worker: %s", line)

    def _died(self) -> E.MtpStudioError:
        """The error for a worker that is gone: a lost RPC server when llama.cpp's last words
        are about RPC (its client aborts on any failed call), a native crash otherwise."""
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        lines = list(self._stderr)
        rpc_said = [ln for ln in lines if any(m in ln for m in _RPC_ABORTS)]
        endpoints = ", ".join(self.spec.rpc) or "the remote devices"
        if rpc_said:
            self.lost = E.RpcConnectionLostError(
                f"The connection to the RPC servers ({endpoints}) was lost, so the model stopped. llama.cpp said: "
                f"{rpc_said[-1]}. The model was unloaded; load it again once every server is running "
                "(`mtp-studio rpc serve` on each machine), or load it without those servers."
            )
        else:
            code = self._proc.returncode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            said = f" llama.cpp said: {lines[-1]}." if lines else ""
            self.lost = E.NativeCrashError(
                f"The worker process running this model (on {endpoints}) stopped ({how}).{said} The model was "
                "unloaded; load it again."
            )
        return self.lost

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self, timeout: float = 10.0) -> None:
        if self._proc.poll() is None:
            try:
                self._send(("exit",))
            except E.MtpStudioError:
                pass
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for s in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            try:
                if s is not None:
                    s.close()
            except OSError:
                pass

    def kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
