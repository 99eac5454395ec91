"""Writing a file so that a crash or a concurrent reader never sees half of it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, *, mode: int = 0o666, fsync: bool = True) -> None:
    """Write ``data`` to a temp file beside ``path`` (unique per process and thread),
    optionally flush it to disk, then rename it over ``path``: a reader sees the old file
    or the new one, never a part. ``mode`` is the new file's permissions (umask applies);
    ``fsync=False`` for caches, whose loss only costs a recomputation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(
    path: Path, obj: object, *, indent: int | None = None, mode: int = 0o666, fsync: bool = True
) -> None:
    write_atomic(path, json.dumps(obj, indent=indent), mode=mode, fsync=fsync)


def read_json_dict(path: Path) -> dict:
    """The JSON object a cache file holds, or ``{}`` when it is missing, unreadable or not
    an object (a cache is rebuilt, never trusted)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
