"""Backend builds of llama-cpp-python, one folder each, and which one the engine loads.

A build is compiled by pip in a child process (cancellable, its log streamed with the
progress CMake prints), unpacked into ``<data>/backends/<name>/lib``, recorded in a
small manifest (atomic writes), proven by a smoke test in another child, and selected
with :func:`use`. The engine then loads the selected build's library: llama-cpp-python
honours ``LLAMA_CPP_LIB_PATH`` when it is set before ``llama_cpp`` is first imported
(:func:`selected_lib_dir`, read by :mod:`engine.runtime.llama.lib`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.backends.plan import Plan
from engine.errors import BuildError, Cancelled
from engine.fileio import write_json_atomic
from engine.paths import backends_dir

LLAMA_CPP_VERSION = "0.3.36"
MANIFEST_VERSION = 1


@dataclass
class Build:
    name: str
    backend: str
    cmake_args: str
    cuda_architectures: list[str]
    created: float
    path: str
    llama_cpp_version: str = LLAMA_CPP_VERSION
    smoke: dict | None = None  # the last smoke test's report

    @property
    def lib_dir(self) -> Path:
        return Path(self.path) / "lib"

    @property
    def proven(self) -> bool:
        return bool(self.smoke and self.smoke.get("ok"))


@dataclass
class Manifest:
    version: int = MANIFEST_VERSION
    selected: str | None = None
    builds: list[Build] = field(default_factory=list)

    def get(self, name: str) -> Build | None:
        return next((b for b in self.builds if b.name == name), None)


def backends_root() -> Path:
    return backends_dir()


def _manifest_path() -> Path:
    return backends_root() / "manifest.json"


def load_manifest() -> Manifest:
    try:
        raw = json.loads(_manifest_path().read_text())
    except (OSError, ValueError):
        return Manifest()
    builds = []
    for b in raw.get("builds", []):
        try:
            builds.append(Build(**b))
        except TypeError:
            continue  # a record from an incompatible version: skip it, keep the rest
    m = Manifest(raw.get("version", MANIFEST_VERSION), raw.get("selected"), builds)
    if m.selected is not None and m.get(m.selected) is None:
        m.selected = None
    return m


def save_manifest(m: Manifest) -> None:
    write_json_atomic(
        _manifest_path(),
        {"version": m.version, "selected": m.selected, "builds": [asdict(b) for b in m.builds]},
        indent=2,
    )


def selected_lib_dir() -> str | None:
    """Library folder of the selected build, when it still exists."""
    m = load_manifest()
    b = m.get(m.selected) if m.selected else None
    if b is not None and (b.lib_dir / _lib_name()).exists():
        return str(b.lib_dir)
    return None


def _lib_name() -> str:
    if sys.platform == "win32":
        return "llama.dll"
    return "libllama.dylib" if sys.platform == "darwin" else "libllama.so"


def build_name(plan: Plan) -> str:
    digest = hashlib.sha256(plan.cmake_args.encode()).hexdigest()[:8]
    if plan.backend == "cuda":
        return f"cuda-sm{'-'.join(plan.cuda_architectures)}-{digest}"
    rpc = "-rpc" if plan.rpc else ""
    if "-DGGML_LLAMAFILE=OFF" in plan.cmake_args:
        return f"{plan.backend}-exact{rpc}-{digest}"
    return f"{plan.backend}{rpc}-{digest}"


_PERCENT = re.compile(r"^\[\s*(\d+)%\]")

LogFn = Callable[[str], None]
ProgressFn = Callable[[float, str], None]


def build(
    plan: Plan,
    *,
    name: str | None = None,
    log: LogFn | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    python: str | None = None,
) -> Build:
    """Compile llama-cpp-python with ``plan.cmake_args`` into a new build folder."""
    if getattr(sys, "frozen", False) and python is None:
        raise BuildError(
            "Building a backend needs Python with pip; run `mtp-studio backend build` from a source install."
        )
    name = name or build_name(plan)
    root = backends_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    work = root / f".building-{name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "wheel").mkdir(parents=True)
    cmd = [
        python or sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-binary",
        "llama-cpp-python",
        f"llama-cpp-python=={LLAMA_CPP_VERSION}",
        "-w",
        str(work / "wheel"),
        "-v",
    ]
    if plan.cmake_args:
        cmd.append("--no-cache-dir")  # pip's wheel cache ignores CMAKE_ARGS: never reuse a CPU wheel for a GPU build
    env = dict(os.environ, CMAKE_ARGS=plan.cmake_args, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    env.pop("LLAMA_CPP_LIB_PATH", None)
    lines: list[str] = []
    try:
        rc = _run_streaming(cmd, env, lines, log, progress, cancel)
        if rc != 0:
            tail = "\n".join(lines[-15:])
            raise BuildError(f"pip could not build llama-cpp-python (exit status {rc}). Last lines of the log:\n{tail}")
        wheels = list((work / "wheel").glob("llama_cpp_python-*.whl"))
        if not wheels:
            raise BuildError("pip finished but produced no llama-cpp-python wheel")
        lib = work / "lib"
        lib.mkdir()
        with zipfile.ZipFile(wheels[0]) as z:
            for info in z.infolist():
                if info.filename.startswith("llama_cpp/lib/") and not info.is_dir():
                    target = lib / Path(info.filename).name
                    with z.open(info) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        if not (lib / _lib_name()).exists():
            raise BuildError(f"the built wheel has no {_lib_name()}")
        shutil.rmtree(work / "wheel")
        (work / "build.log").write_text("\n".join(lines))
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    record = Build(name, plan.backend, plan.cmake_args, list(plan.cuda_architectures), time.time(), str(final))
    m = load_manifest()
    m.builds = [b for b in m.builds if b.name != name] + [record]
    save_manifest(m)
    return record


def _run_streaming(cmd, env, lines: list[str], log, progress, cancel) -> int:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True, bufsize=1
    )

    def killer() -> None:
        while proc.poll() is None:
            if cancel is not None and cancel.wait(0.2):
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                return

    watcher = threading.Thread(target=killer, daemon=True)
    watcher.start()
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            line = raw.rstrip()
            lines.append(line)
            if log is not None:
                log(line)
            m = _PERCENT.match(line.strip())
            if m and progress is not None:
                progress(int(m.group(1)) / 100.0, line.strip())
    except BaseException:  # Ctrl-C, a timeout, a failing log callback: never leave the compile running
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait()
        raise
    rc = proc.wait()
    if cancel is not None and cancel.is_set():
        raise Cancelled("backend build cancelled")
    return rc


def use(name: str, *, force: bool = False) -> Build:
    m = load_manifest()
    b = m.get(name)
    if b is None:
        known = ", ".join(x.name for x in m.builds) or "none"
        raise BuildError(f"No build named {name!r} (builds: {known}).")
    if not (b.lib_dir / _lib_name()).exists():
        raise BuildError(f"Build {name!r} is missing its library at {b.lib_dir}; build it again.")
    if not b.proven and not force:
        raise BuildError(f"Build {name!r} has not passed its smoke test; run `mtp-studio backend smoke {name}` first.")
    m.selected = name
    save_manifest(m)
    return b


def record_smoke(name: str, report: dict) -> None:
    m = load_manifest()
    b = m.get(name)
    if b is not None:
        b.smoke = report
        save_manifest(m)
