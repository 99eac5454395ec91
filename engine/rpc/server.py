"""llama.cpp's RPC server for this machine's devices (``mtp-studio rpc serve``).

The server is llama.cpp's own ``ggml_backend_rpc_start_server`` from the build the app
loads — the function the upstream ``rpc-server`` tool calls after parsing its flags — run
in a child process: it blocks forever and llama.cpp may abort on a malformed peer, so it
never runs inside the app. Because it is the same library as the client, the protocol
versions always match between machines running the same MTP Studio.

Upstream calls the protocol a proof of concept with no authentication: anyone who can
connect can read and write the server's memory. It binds 127.0.0.1 unless another address
is asked for explicitly (``allow_network``), and then it says so loudly.

:class:`RpcServer` starts, watches and stops the child (CLI, GUI, tests);
:func:`main` is the child.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

from engine.backends.builds import selected_lib_dir
from engine.backends.ggmllib import ACCEL, CPU, LIB_NAME, open_ggml, rpc_entry_point
from engine.childproc import child_env, module_command
from engine.errors import InvalidSettingError, RpcError
from engine.paths import cache_dir
from engine.rpc.endpoints import DEFAULT_PORT, Endpoint, is_loopback

CHILD_MODULE = "engine.rpc.server"
READY_MARK = "mtp-studio: port checked, starting llama.cpp's RPC server"

NETWORK_WARNING = (
    "WARNING: the RPC server accepts connections from other machines at {endpoint}. llama.cpp's RPC protocol "
    "has no authentication and no encryption: anyone who can reach this port can read and write this machine's "
    "model memory and make it compute. Use it only on a network you trust completely (a home LAN behind a "
    "router, a private cluster link), never on a public or shared network."
)


def weight_cache_dir() -> Path:
    """Where ``--cache`` keeps uploaded weights (by content hash), so a second load of the
    same model skips the network."""
    return cache_dir() / "rpc"


# ------------------------------------------------------------------ the library
def ggml_lib_dir() -> Path:
    """The lib folder of the llama.cpp build the app uses, found as the engine finds it
    (``LLAMA_CPP_LIB_PATH``, the selected build, the installed package) without importing
    ``llama_cpp``, which would load libllama too."""
    candidates = []
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        candidates.append(Path(os.environ["LLAMA_CPP_LIB_PATH"]))
    elif not os.environ.get("MTP_STUDIO_NO_BACKEND_SELECTION") and (sel := selected_lib_dir()):
        candidates.append(Path(sel))
    spec = importlib.util.find_spec("llama_cpp")
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(list(spec.submodule_search_locations)[0]) / "lib")
    for d in candidates:
        if (d / LIB_NAME).exists():
            return d
    try:  # where llama-cpp-python itself found its library (frozen layouts, unusual installs)
        import llama_cpp.llama_cpp as raw

        d = Path(raw._lib._name).parent
        if (d / LIB_NAME).exists():
            return d
    except Exception:
        pass
    raise RpcError(f"Cannot find llama.cpp's {LIB_NAME} (looked in {', '.join(map(str, candidates)) or 'nowhere'}).")


_START_SERVER = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
)


def rpc_supported() -> bool:
    """Whether the build the app uses has the RPC backend (``-DGGML_RPC=ON``). The
    Makefile asks this after installing."""
    try:
        return bool(open_ggml(ggml_lib_dir()).ggml_backend_reg_by_name(b"RPC"))
    except (OSError, RpcError):
        return False


def _server_devices(lib: ctypes.CDLL, names: list[str]) -> list[int]:
    """The devices to serve, chosen as upstream's rpc-server does: the named ones, else
    every accelerator (GPU), else the CPU."""
    if names:
        out = []
        for n in names:
            dev = lib.ggml_backend_dev_by_name(n.encode())
            if not dev:
                known = [
                    lib.ggml_backend_dev_name(lib.ggml_backend_dev_get(i)).decode()
                    for i in range(lib.ggml_backend_dev_count())
                ]
                raise InvalidSettingError(f"No device named {n!r} here (devices: {', '.join(known)}).")
            out.append(dev)
        return out
    devs = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    gpus = [d for d in devs if lib.ggml_backend_dev_type(d) not in (CPU, ACCEL)]
    return gpus or [d for d in devs if lib.ggml_backend_dev_type(d) == CPU][:1]


def _check_port(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise RpcError(
                f"Cannot listen on {host}:{port}: {e.strerror or e}. Another server may be using the port; "
                "choose another with --port."
            ) from None


def serve_forever(host: str, port: int, *, threads: int, cache: Path | None, devices: list[str]) -> None:
    """The child's body: llama.cpp's RPC server until the process is stopped."""
    lib = open_ggml(ggml_lib_dir())
    lib.ggml_backend_load_all()
    start = _START_SERVER(rpc_entry_point(lib, "ggml_backend_rpc_start_server"))
    devs = _server_devices(lib, devices)
    if not devs:
        raise RpcError("llama.cpp found no device to serve on this machine.")
    _check_port(host, port)
    print(READY_MARK, flush=True)  # the port was free: a connection from now on reaches this server
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    arr = (ctypes.c_void_p * len(devs))(*devs)
    endpoint = str(Endpoint(host, port)).encode()
    cache_arg = str(cache).encode() if cache is not None else None
    done = threading.Event()

    def run() -> None:
        try:
            start(endpoint, cache_arg, threads, len(devs), arr)  # returns only on failure
        finally:
            done.set()

    threading.Thread(target=run, name="rpc-server", daemon=True).start()
    while not done.wait(0.5):  # the main thread stays in Python, so Ctrl-C and SIGTERM work
        pass
    raise RpcError("llama.cpp's RPC server stopped (see the lines above).")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (tests, benchmarks, port 0)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def default_threads() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.rpc.server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--cache", action="store_true")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--device", action="append", default=[])
    a = ap.parse_args(argv)
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    cache = (a.cache_dir or weight_cache_dir()) if a.cache else None
    try:
        serve_forever(a.host, a.port, threads=a.threads, cache=cache, devices=a.device)
    except KeyboardInterrupt:
        return 0
    except (RpcError, InvalidSettingError, OSError) as e:
        print(f"mtp-studio rpc serve: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


# ------------------------------------------------------------------ the parent side
@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    threads: int | None = None
    cache: bool = False
    cache_dir: Path | None = None
    devices: tuple[str, ...] = ()
    #: serving on a non-loopback address must be asked for explicitly
    allow_network: bool = False

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidSettingError(f"The RPC port must be between 1 and 65535 (0: any free one), not {self.port}.")
        if self.threads is not None and self.threads < 1:
            raise InvalidSettingError("The RPC server needs at least one thread.")
        if not is_loopback(self.host) and not self.allow_network:
            raise InvalidSettingError(
                f"Serving RPC on {self.host} would let other machines use this one, and llama.cpp's RPC protocol has "
                "no authentication. Pass --allow-network (in the app: tick 'Accept other machines') if this network "
                "is trusted; otherwise keep the default 127.0.0.1."
            )

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.host, self.port)

    @property
    def warning(self) -> str | None:
        return None if is_loopback(self.host) else NETWORK_WARNING.format(endpoint=self.endpoint)


class RpcServer:
    """One ``rpc serve`` child: :meth:`start` returns once the port accepts connections
    (or raises with the child's own words); :meth:`stop` ends it. Thread-safe enough for
    a GUI: all state changes happen under a lock."""

    def __init__(self, options: ServerOptions):
        options.check()
        if options.port == 0:  # llama.cpp cannot report the port it got: choose one here
            options = replace(options, port=free_port(options.host))
        self.options = options
        self._proc: subprocess.Popen | None = None
        fd, name = tempfile.mkstemp(prefix="mtp-studio-rpc-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        weakref.finalize(self, self.log_path.unlink, missing_ok=True)
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> Endpoint:
        return self.options.endpoint

    def command(self) -> list[str]:
        o = self.options
        args = ["--host", o.host, "--port", str(o.port), "--threads", str(o.threads or default_threads())]
        if o.cache:
            args.append("--cache")
            if o.cache_dir is not None:
                args += ["--cache-dir", str(o.cache_dir)]
        for d in o.devices:
            args += ["--device", d]
        return module_command(CHILD_MODULE, *args)

    def start(self, timeout: float = 30.0) -> RpcServer:
        with self._lock:
            if self.running:
                return self
            with open(self.log_path, "ab") as log:  # O_APPEND: the child's writes never overwrite each other
                self._proc = subprocess.Popen(
                    self.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env(PYTHONUNBUFFERED="1"),
                )
        deadline = time.monotonic() + timeout
        host = (
            "127.0.0.1"
            if self.options.host in ("0.0.0.0", "")
            else "::1"
            if self.options.host == "::"
            else self.options.host
        )
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RpcError(
                    f"The RPC server did not start: {self.log_tail() or f'exit status {self._proc.returncode}'}"
                )
            if READY_MARK.encode() not in self._read_log():
                time.sleep(0.05)
                continue
            try:  # the child checked the port was free before llama.cpp bound it
                with socket.create_connection((host, self.options.port), timeout=0.5):
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RpcError(f"The RPC server did not accept connections within {timeout:.0f} s: {self.log_tail()}")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _read_log(self) -> bytes:
        try:
            return self.log_path.read_bytes()
        except OSError:
            return b""

    def log_text(self) -> str:
        return self._read_log().decode("utf-8", "replace")

    def log_tail(self, n: int = 4) -> str:
        lines = [ln.strip() for ln in self.log_text().splitlines() if ln.strip()]
        return " / ".join(lines[-n:])

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                return
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def kill(self) -> None:
        """End the server abruptly, as a machine that loses power would (tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> RpcServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
