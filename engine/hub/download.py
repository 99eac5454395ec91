"""Resumable, verified downloads through ``huggingface_hub``.

``hf_hub_download`` (2.x) deletes its partial file when a download fails, so a cancel,
crash or restart would start over. This module keeps huggingface_hub for every request
(metadata HEAD with redirects, the streamed GET with its session, TLS verification,
auth headers, 429 Retry-After handling, in-call resume on dropped connections) and adds
what a desktop app needs around it:

* the partial file lives in the library's ``.downloads`` folder with a sidecar naming
  what it is (URL, ETag, size, SHA-256); a later call resumes it with a Range request;
* retries with backoff for dropped connections and 5xx/429, honouring Retry-After;
* progress (bytes, rate, ETA) through a callback, and cancel (the partial stays);
* the SHA-256 is checked against the Hub's LFS metadata before a file is handed over
  (git's blob SHA-1 for small non-LFS files); a mismatch deletes the partial. It is
  computed as the bytes are written, so verifying costs no second pass over the file;
* a disk-space check, with headroom, before any byte is fetched.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from engine.errors import Cancelled, ChecksumError, DiskSpaceError, UnsafePathError
from engine.hub.remote import HubConfig, HubError, translate

#: bytes per write while streaming. huggingface_hub writes 10 MB at a time, so a dropped
#: connection loses up to 10 MB and progress moves in 10 MB jumps; 256 KiB keeps both small.
STREAM_CHUNK = 256 << 10
RETRIES = 6
BACKOFF_S = (0.5, 1, 2, 4, 8, 16)
RETRY_STATUS = (429, 500, 502, 503, 504)
HEADROOM = 64 << 20


@dataclass
class FileProgress:
    """One file's progress, for a progress bar."""

    filename: str
    done: int
    total: int
    rate: float  # bytes/s, smoothed
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0


ProgressFn = Callable[[FileProgress], None]


@dataclass
class Target:
    """What to download: a file at a pinned revision, and what it must hash to."""

    repo_id: str
    path: str
    revision: str
    size: int
    sha256: str | None
    blob_id: str | None = None


@dataclass
class _Sidecar:
    url: str
    etag: str | None
    size: int
    sha256: str | None


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def check_remote_path(path: str) -> str:
    """A file path from a Hub listing, if it is a plain relative path (no ``..``, no
    absolute or drive path, no backslash or control characters); else a clear error."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or ":" in parts[0]
        or any(c < " " for c in path)
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise UnsafePathError(f"The Hub listed a file path that is not safe to use: {path!r}. Nothing was downloaded.")
    return path


def check_target(t: Target) -> None:
    if not _REPO_ID.match(t.repo_id) or ".." in t.repo_id:
        raise UnsafePathError(f"The repository name {t.repo_id!r} is not a Hugging Face repo id (owner/name).")
    if not _COMMIT.match(t.revision):
        raise UnsafePathError(f"The Hub answered with a revision that is not a commit hash: {t.revision!r}.")
    check_remote_path(t.path)


def partial_paths(folder: Path, t: Target) -> tuple[Path, Path]:
    """Where ``t``'s partial file and its sidecar live; always inside ``folder``."""
    check_target(t)
    base = folder / t.repo_id.replace("/", "__") / t.revision / t.path
    root = folder.resolve()
    if not base.resolve().is_relative_to(root):  # e.g. a symlinked folder inside
        raise UnsafePathError(f"{t.path} would be written outside the download folder {folder}.")
    return base.with_name(base.name + ".part"), base.with_name(base.name + ".part.json")


class _Meter:
    """Bytes -> FileProgress, with a smoothed rate; raises Cancelled when asked to."""

    def __init__(
        self, filename: str, total: int, start: int, progress: ProgressFn | None, cancel: threading.Event | None
    ):
        self.filename = filename
        self.total = total
        self.done = start
        self.progress = progress
        self.cancel = cancel
        self._t = time.monotonic()
        self._last_emit = 0.0
        self._bytes_since = 0
        self.rate = 0.0

    def add(self, n: int) -> None:
        self.done += n
        self._bytes_since += n
        now = time.monotonic()
        dt = now - self._t
        if dt >= 0.25:
            inst = self._bytes_since / dt
            self.rate = inst if self.rate == 0 else 0.7 * self.rate + 0.3 * inst
            self._t, self._bytes_since = now, 0
        if self.progress is not None and (now - self._last_emit >= 0.1 or self.done >= self.total):
            self._last_emit = now
            eta = (self.total - self.done) / self.rate if self.rate > 0 else None
            self.progress(FileProgress(self.filename, self.done, self.total, self.rate, eta))
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("download cancelled")


def _tqdm_class(meter: _Meter):
    """A tqdm subclass huggingface_hub can drive: it forwards every update to us."""
    from tqdm.std import tqdm

    class _Bar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if n and n > 0:
                meter.add(int(n))
            elif n and n < 0:  # huggingface_hub rewinds when a server ignores Range
                meter.done += int(n)
            return None

    return _Bar


def _retry_after(e: Exception) -> float | None:
    resp = getattr(e, "response", None)
    value = resp.headers.get("Retry-After") if resp is not None else None
    if value and value.strip().isdigit():
        return float(value.strip())
    return None


def _sha256(path: Path, cancel: threading.Event | None, limit: int | None = None) -> "hashlib._Hash":
    """SHA-256 of the file (or of its first ``limit`` bytes)."""
    h = hashlib.sha256()
    left = limit
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20 if left is None else min(8 << 20, left)):
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
            if cancel is not None and cancel.is_set():
                raise Cancelled("verification cancelled")
    return h


@dataclass
class _RunningHash:
    """SHA-256 of every byte written to the partial file since ``hashed`` was 0."""

    hasher: "hashlib._Hash"
    hashed: int


class _HashingFile:
    """The partial file as huggingface_hub writes it, hashing every byte on the way, so
    verifying needs no second pass over the file: on a real link the hash is computed
    while the client would be waiting for the network anyway.

    The running hash stands for the file only while ``hashed`` equals the file's size:
    if huggingface_hub rewinds (a server that ignored the Range request), the bytes it
    discards were hashed too, the counts no longer match, and the file is hashed from
    disk instead."""

    def __init__(self, f, running: _RunningHash | None):
        self._f = f
        self._running = running

    def write(self, data) -> int:
        view = memoryview(data)
        while view:  # an unbuffered write may take only part of the chunk
            n = self._f.write(view)
            if self._running is not None:
                self._running.hasher.update(view[:n])
                self._running.hashed += n
            view = view[n:]
        return len(data)

    def tell(self) -> int:
        return self._f.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def truncate(self, size: int | None = None) -> int:
        return self._f.truncate(size)


def _git_sha1(path: Path, size: int) -> str:
    h = hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_space(folder: Path, needed: int, limit_free: int | None = None) -> None:
    """``limit_free``: bytes the library may still use (a configured size limit)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if limit_free is not None:
        free = min(free, limit_free)
    if needed + HEADROOM > free:
        raise DiskSpaceError(needed + HEADROOM, max(free, 0), str(folder))


def download(
    cfg: HubConfig,
    t: Target,
    partial_dir: Path,
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """Download (or resume) ``t`` into its partial file and verify it; returns the
    verified partial path (the caller moves it into the library). Raises
    :class:`Cancelled` (partial kept), :class:`ChecksumError` (partial deleted) or
    :class:`HubError`."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    cfg.api()  # offline check
    constants.DOWNLOAD_CHUNK_SIZE = STREAM_CHUNK
    part, side = partial_paths(partial_dir, t)
    part.parent.mkdir(parents=True, exist_ok=True)
    url = hf_hub_url(t.repo_id, t.path, revision=t.revision, endpoint=cfg.endpoint)
    try:
        meta = get_hf_file_metadata(url, token=cfg.token or False, endpoint=cfg.endpoint, retry_on_errors=True)
    except Exception as e:
        raise translate(e, f"{t.repo_id}/{t.path}") from None
    size = meta.size if meta.size is not None else t.size
    if t.sha256 and meta.etag and len(meta.etag) == 64 and meta.etag != t.sha256:
        raise HubError(f"{t.path} changed on the Hub while it was being fetched; try again.")
    expected = _Sidecar(url, meta.etag, size, t.sha256)
    if part.exists():
        try:
            old = _Sidecar(**json.loads(side.read_text()))
        except (OSError, ValueError, TypeError):
            old = None
        if old != expected or part.stat().st_size > size:
            part.unlink()  # a different file (or a foreign partial): start over
    tmp = side.with_name(side.name + ".tmp")
    tmp.write_text(json.dumps(asdict(expected)))
    tmp.replace(side)

    attempt = 0
    running: _RunningHash | None = None
    while True:
        have = part.stat().st_size if part.exists() else 0
        if have < size:
            if t.sha256 and (running is None or running.hashed != have):
                # a resumed partial: hash what is already on disk, then the rest as it arrives
                running = _RunningHash(_sha256(part, cancel, have) if have else hashlib.sha256(), have)
            meter = _Meter(t.path, size, have, progress, cancel)
            headers = build_hf_headers(token=cfg.token or False)
            source = meta.location or url
            if urlparse(source).netloc != urlparse(url).netloc:
                headers.pop("authorization", None)  # a signed CDN URL: the token stays with the Hub
            try:
                with open(part, "ab", buffering=0) as f:  # chunks are large: skip the extra buffer copy
                    http_get(
                        source,
                        _HashingFile(f, running),
                        resume_size=have,
                        headers=headers,
                        expected_size=size,
                        displayed_filename=t.path,
                        tqdm_class=_tqdm_class(meter),
                    )
            except Cancelled:
                raise
            except Exception as e:
                status = getattr(getattr(e, "response", None), "status_code", None)
                transient = (isinstance(e, HfHubHTTPError) and status in RETRY_STATUS) or not isinstance(
                    e, HfHubHTTPError
                )
                if not transient or attempt >= RETRIES:
                    raise translate(e, f"{t.repo_id}/{t.path}") from None
                wait = _retry_after(e) or BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                attempt += 1
                sleep(wait)
                continue
        break

    got = part.stat().st_size
    if got != size:
        part.unlink()
        raise ChecksumError(f"{t.path}: downloaded {got} bytes but the Hub says {size}; the partial file was removed.")
    if t.sha256:
        if running is not None and running.hashed == got:
            digest = running.hasher.hexdigest()
        else:
            digest = _sha256(part, cancel).hexdigest()
        if digest != t.sha256:
            part.unlink()
            side.unlink(missing_ok=True)
            raise ChecksumError(
                f"{t.path}: SHA-256 {digest[:12]}… does not match the Hub's {t.sha256[:12]}…; the download was "
                "discarded. Try again; if it keeps failing, the file on the Hub may be damaged."
            )
    elif t.blob_id and _git_sha1(part, got) != t.blob_id:
        part.unlink()
        raise ChecksumError(f"{t.path}: content does not match the Hub's git hash; the download was discarded.")
    return part


def discard_partial(partial_dir: Path, t: Target) -> None:
    for p in partial_paths(partial_dir, t):
        p.unlink(missing_ok=True)


def partial_size(partial_dir: Path, t: Target) -> int:
    part, _ = partial_paths(partial_dir, t)
    return part.stat().st_size if part.exists() else 0
