"""The double-click app: build the Linux package for real and run the frozen binary.

Slow (a PyInstaller build, about a minute on 2 cores); run by ``make test`` and by
``make package-test``. The frozen binary runs offscreen with its own XDG folders, so
the test also shows where a frozen app keeps its data: the same platformdirs paths as
a source install, and nothing inside the app folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        sys.platform != "linux", reason="this test builds the Linux package; macOS/Windows: see docs/packaging.md"
    ),
]


@dataclass
class Package:
    folder: Path
    tarball: Path

    @property
    def binary(self) -> Path:
        return self.folder / "mtp-studio"


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Package:
    out = tmp_path_factory.mktemp("package")
    cmd = [
        sys.executable,
        str(ROOT / "packaging" / "build.py"),
        "--dist",
        str(out / "dist"),
        "--work",
        str(out / "work"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"packaging/build.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    tarballs = list((out / "dist").glob("mtp-studio-linux-*.tar.gz"))
    assert len(tarballs) == 1, proc.stdout
    return Package(out / "dist" / "mtp-studio", tarballs[0])


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A fresh user: own HOME and XDG folders, no MTP_STUDIO_HOME, no venv on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MTP_STUDIO_", "XDG_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_STATE_HOME=str(home / "state"),
        QT_QPA_PLATFORM="offscreen",
        GGML_NO_BACKTRACE="1",
        PATH="/usr/bin:/bin",
        **extra,
    )
    return env


def run(binary: Path, *args: str, env: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=env["HOME"]
    )


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_the_folder_holds_everything_the_app_needs(package):
    internal = package.folder / "_internal"
    assert os.access(package.binary, os.X_OK)
    assert (internal / "resources" / "demo.gguf").read_bytes() == (ROOT / "resources" / "demo.gguf").read_bytes()
    assert (internal / "resources" / "style.qss").is_file()
    for lib in ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so"):
        assert (internal / "llama_cpp" / "lib" / lib).is_file(), lib
    plugins = internal / "PySide6" / "Qt" / "plugins" / "platforms"
    assert {"libqoffscreen.so", "libqxcb.so"} <= {p.name for p in plugins.iterdir()}
    assert not list(internal.rglob("*WebEngine*")), "WebEngine must stay out of the package"
    # the test dependencies installed beside the app (torch: 630 MB) stay out of it
    for name in ("torch", "sympy", "matplotlib", "pytest", "training"):
        assert not (internal / name).exists(), f"{name} must stay out of the package"
    dangling = [str(p) for p in package.folder.rglob("*") if p.is_symlink() and not p.exists()]
    assert not dangling, f"broken links in the package: {dangling}"

    desktop = dict(
        line.split("=", 1) for line in (package.folder / "mtp-studio.desktop").read_text().splitlines() if "=" in line
    )
    assert (
        desktop["Exec"] == "mtp-studio %f"
        and desktop["MimeType"] == "application/x-gguf;"
        and desktop["Icon"] == "mtp-studio"
        and desktop["Type"] == "Application"
    )
    assert (package.folder / "mtp-studio.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with tarfile.open(package.tarball) as tar:
        names = set(tar.getnames())
    for member in (
        "mtp-studio/mtp-studio",
        "mtp-studio/install.sh",
        "mtp-studio/mtp-studio.desktop",
        "mtp-studio/_internal/resources/demo.gguf",
        "mtp-studio/_internal/llama_cpp/lib/libllama.so",
    ):
        assert member in names, member


def test_frozen_self_test_passes_and_writes_only_to_the_user_folders(package, tmp_path):
    before = snapshot(package.folder)
    proc = run(package.binary, "--self-test", env=user_env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("mtp-studio self-test: ok"), line
    # identical, or different only at near-ties within the measured batch noise (docs/mtp.md)
    assert ("greedy == MTP: yes" in line or "near-ties within batch noise" in line) and "frozen True" in line, line
    assert snapshot(package.folder) == before, "the frozen app wrote inside its own folder"
    # the probe's cache went where a source install keeps it
    assert (tmp_path / "cache" / "mtp-studio" / "load-probe.json").is_file()


def test_frozen_and_source_installs_use_the_same_paths(package, tmp_path):
    env = user_env(tmp_path)
    frozen = json.loads(run(package.binary, "paths", "--json", env=env).stdout)
    source_env = dict(env, PYTHONPATH=str(ROOT))
    source = subprocess.run(
        [sys.executable, "-m", "app.launcher", "paths", "--json"],
        capture_output=True,
        text=True,
        env=source_env,
        timeout=60,
        check=True,
    )
    source = json.loads(source.stdout)
    assert frozen.pop("frozen") is True and source.pop("frozen") is False
    assert frozen == source
    assert frozen["models"] == str(tmp_path / "data" / "mtp-studio" / "models")


def test_frozen_app_uses_a_backend_build_from_the_user_data_folder(package, tmp_path):
    """A build selected in the user's backends folder is the library the frozen app loads."""
    env = user_env(tmp_path)
    build = tmp_path / "data" / "mtp-studio" / "backends" / "cpu-test"
    shutil.copytree(package.folder / "_internal" / "llama_cpp" / "lib", build / "lib", symlinks=True)
    manifest = {
        "version": 1,
        "selected": "cpu-test",
        "builds": [
            {
                "name": "cpu-test",
                "backend": "cpu",
                "cmake_args": "",
                "cuda_architectures": [],
                "created": 0.0,
                "path": str(build),
                "smoke": {"ok": True},
            }
        ],
    }
    (build.parent / "manifest.json").write_text(json.dumps(manifest))

    detect = run(package.binary, "backend", "detect", "--json", env=env)
    assert detect.returncode == 0, detect.stderr
    in_use = json.loads(detect.stdout)["in_use"]
    assert in_use["build"] == "cpu-test"
    assert Path(in_use["lib_dir"]) == build / "lib"
    # and a smoke test of that build, in a child process of the frozen binary, decodes
    smoke = run(package.binary, "backend", "smoke", "cpu-test", "--json", env=env)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert json.loads(smoke.stdout.strip().splitlines()[-1])["ok"] is True


def test_frozen_app_rejects_a_malformed_gguf_without_crashing(package, tmp_path):
    bad = tmp_path / "broken.gguf"
    demo = (ROOT / "resources" / "demo.gguf").read_bytes()
    bad.write_bytes(demo[: len(demo) // 3])  # a download cut short
    proc = run(package.binary, "validate", str(bad), "--probe", env=user_env(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "truncated" in (proc.stdout + proc.stderr).lower()


def test_frozen_app_runs_the_ab_bench_and_leaves_the_harness_out(package, tmp_path):
    """The A/B bench on the user's model is the product's; the benchmarks harness (and its
    fixtures, the tests) stays in the source checkout: its commands say so in one line."""
    env = user_env(tmp_path)
    demo = str(ROOT / "resources" / "demo.gguf")
    ab = run(package.binary, "bench", "--model", demo, "--depths", "0,1", "--runs", "1", "--max-tokens", "8", env=env)
    assert ab.returncode == 0 and "identical" in ab.stdout, ab.stdout + ab.stderr
    proc = run(package.binary, "bench", "slots", "--model", demo, env=env)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stdout + proc.stderr
    assert "bench slots is a benchmark of the source checkout" in proc.stderr
    for name in ("benchmarks", "tests"):
        assert not (package.folder / "_internal" / name).exists(), f"{name} must stay out of the package"


def test_frozen_window_opens_offscreen(package, tmp_path):
    before = snapshot(package.folder)
    proc = run(package.binary, env=user_env(tmp_path, MTP_STUDIO_QUIT_AFTER_PAINT="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mtp-studio: window painted" in proc.stdout
    assert snapshot(package.folder) == before
    assert (tmp_path / "config" / "mtp-studio").is_dir(), "settings belong in the user's config folder"


def test_install_script_adds_a_launcher_and_a_menu_entry(package, tmp_path):
    unpacked = tmp_path / "apps"
    with tarfile.open(package.tarball) as tar:
        tar.extractall(unpacked, filter="tar")
    home = tmp_path / "home"
    env = user_env(home)
    env.pop("XDG_DATA_HOME")
    proc = subprocess.run(
        ["sh", str(unpacked / "mtp-studio" / "install.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    launcher = home / ".local" / "bin" / "mtp-studio"
    assert launcher.resolve() == (unpacked / "mtp-studio" / "mtp-studio").resolve()
    entry = (home / ".local" / "share" / "applications" / "mtp-studio.desktop").read_text()
    assert f"Exec={unpacked / 'mtp-studio' / 'mtp-studio'} %f" in entry
    assert (
        'glob pattern="*.gguf"' in (home / ".local" / "share" / "mime" / "packages" / "mtp-studio-gguf.xml").read_text()
    )
    assert (home / ".local" / "share" / "icons" / "hicolor" / "256x256" / "apps" / "mtp-studio.png").is_file()
    # the launcher on PATH runs the unpacked app
    paths = run(launcher, "paths", "--json", env=user_env(home))
    assert paths.returncode == 0 and json.loads(paths.stdout)["frozen"] is True, paths.stderr


def test_frozen_app_serves_rpc_and_pools_a_model_over_it(package, tmp_path):
    """`rpc serve` and `generate --rpc` from the frozen binary: the server runs from the
    bundled library, and the pooled model runs in the binary's worker child."""
    import socket
    import subprocess
    import time

    from engine.rpc.server import free_port

    port = free_port()
    env = user_env(tmp_path)
    server = subprocess.Popen(
        [str(package.binary), "rpc", "serve", "--port", str(port), "--threads", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.communicate()
                time.sleep(0.1)
        proc = run(
            package.binary,
            "generate",
            "--model",
            str(ROOT / "resources" / "demo.gguf"),
            "--prompt",
            "def f(x):",
            "--max-tokens",
            "24",
            "--rpc",
            f"127.0.0.1:{port}",
            "--json",
            env=env,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["model"]["rpc"] == [f"127.0.0.1:{port}"] and len(out["tokens"]) == 24
        assert out["model"]["placement"]["devices"][0]["endpoint"] == f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.communicate(timeout=10)
