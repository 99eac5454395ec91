"""Build the double-click app for this platform: ``python packaging/build.py`` (``make package``).

Runs PyInstaller on ``packaging/mtp-studio.spec`` and then finishes the platform's
package:

- Linux: ``mtp-studio/`` (the binary, ``_internal/``, the ``.desktop`` entry, the icon and
  ``install.sh``) and ``mtp-studio-linux-<arch>.tar.gz``, an AppImage-style tarball: unpack
  anywhere, double-click or run ``./mtp-studio``, or ``./install.sh`` for a menu entry.
- macOS: ``MTP Studio.app`` (built with the Metal backend) and a ``.zip`` of it.
- Windows: ``mtp-studio/`` with ``mtp-studio.exe`` and ``mtp-studio-cli.exe``, and a ``.zip``.

Prints one line per artefact with its size. Standard library only, so it runs before
anything else is set up.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "mtp-studio"


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def human(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def run_pyinstaller(dist: Path, work: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "PyInstaller",
        str(ROOT / "packaging" / f"{NAME}.spec"),
        "--noconfirm",
        "--log-level",
        "WARN",
        "--distpath",
        str(dist),
        "--workpath",
        str(work),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return dist / NAME


def finish_linux(app: Path, dist: Path) -> Path:
    linux = ROOT / "packaging" / "linux"
    shutil.copy2(linux / f"{NAME}.desktop", app)
    shutil.copy2(linux / "install.sh", app)
    shutil.copy2(linux / f"{NAME}-gguf.xml", app)
    shutil.copy2(ROOT / "resources" / "icon.png", app / f"{NAME}.png")
    tarball = dist / f"{NAME}-linux-{platform.machine()}.tar.gz"
    partial = tarball.with_name(tarball.name + ".partial")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        tar.add(app, arcname=NAME)
    partial.replace(tarball)
    return tarball


def finish_zip(folder: Path, dist: Path, label: str) -> Path:
    base = dist / f"{NAME}-{label}-{platform.machine()}"
    return Path(shutil.make_archive(str(base), "zip", root_dir=folder.parent, base_dir=folder.name))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dist", type=Path, default=ROOT / "build" / "dist", help="where the package goes")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller", help="PyInstaller's work folder")
    ap.add_argument("--no-archive", action="store_true", help="only the folder (or .app), no tarball/zip")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    app = run_pyinstaller(args.dist.resolve(), args.work.resolve())
    artefacts = [app]
    if sys.platform == "darwin":
        bundle = args.dist.resolve() / "MTP Studio.app"
        artefacts = [bundle] + ([] if args.no_archive else [finish_zip(bundle, args.dist.resolve(), "macos")])
    elif sys.platform == "win32":
        artefacts += [] if args.no_archive else [finish_zip(app, args.dist.resolve(), "windows")]
    else:
        tarball = finish_linux(app, args.dist.resolve())
        if args.no_archive:
            tarball.unlink()
        else:
            artefacts.append(tarball)
    for a in artefacts:
        size = folder_size(a) if a.is_dir() else a.stat().st_size
        print(f"{a}  {human(size)}")
    print(f"built in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
