"""Reading GGUF file names on the Hub: quantization, shard sets, MTP heads.

Names are only a hint (the header is the truth: :mod:`engine.hub.remote` reads it with
a ranged request); they are what a repo listing can be grouped by before downloading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engine.gguf.shards import parse_shard_name

_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:IQ[1-4]_(?:XXS|XS|S|M|NL)|Q[2-8]_K(?:_[SMLX]{1,2})?|Q[4-8]_[01]|Q[2-8]_K_XL|TQ[12]_0|MXFP4|NVFP4"
    r"|F16|BF16|F32|Q4_0_4_[48]|Q1_0|Q2_0))(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def quant_of(filename: str) -> str | None:
    name = filename.rsplit("/", 1)[-1]
    m = _QUANT.search(name)
    return m.group(1).upper() if m else None


def is_head_name(filename: str) -> bool:
    """``mtp-*.gguf``: the converter's name for a head-only MTP file."""
    return filename.rsplit("/", 1)[-1].lower().startswith("mtp-")


@dataclass
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS oid
    blob_id: str | None


@dataclass
class FileGroup:
    """One downloadable model: a single file or a complete (or incomplete) shard set."""

    name: str  # first file's path
    files: list[RemoteFile]
    quant: str | None
    head: bool  # an MTP head (by name; confirmed from the header when read)
    expected_shards: int = 1
    header: dict | None = field(default=None)  # remote header summary, when read

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def complete(self) -> bool:
        return len(self.files) == self.expected_shards


def group_gguf_files(files: list[RemoteFile]) -> list[FileGroup]:
    """GGUF files of a repo grouped by shard set, sorted by quantization and name."""
    singles: list[FileGroup] = []
    sets: dict[tuple[str, int], list[RemoteFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        s = parse_shard_name(f.path)
        if s is None:
            singles.append(FileGroup(f.path, [f], quant_of(f.path), is_head_name(f.path)))
        else:
            folder = f.path.rsplit("/", 1)[0] + "/" if "/" in f.path else ""
            sets.setdefault((folder + s.prefix, s.count), []).append(f)
    groups = list(singles)
    for (prefix, count), members in sets.items():
        members.sort(key=lambda f: f.path)
        groups.append(FileGroup(members[0].path, members, quant_of(prefix), is_head_name(prefix), count))
    groups.sort(key=lambda g: (g.head, g.quant or "~", g.name))
    return groups
