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


#: "assistant" as a word of a file name: Gemma 4's drafters (``gemma-4-E2B-it-assistant-Q8_0.gguf``)
_ASSISTANT = re.compile(r"(?<![a-z0-9])assistant(?![a-z0-9])")


def is_head_name(filename: str) -> bool:
    """A head or drafter file by its name: ``mtp-*.gguf`` (the converter's name for a
    head-only MTP file, the one llama.cpp's downloader pairs), any file in an ``MTP/``
    folder (where repos keep a target's drafters), or a Gemma 4 assistant. ``-MTP-`` inside
    a root file's name is not one: repos name integrated targets so (Qwen3.6-27B-MTP)."""
    *folders, name = filename.lower().split("/")
    return name.startswith("mtp-") or "mtp" in folders or bool(_ASSISTANT.search(name))


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


def _stem(name: str) -> str:
    """A file name reduced to what names its model: no folder, no ``mtp-`` prefix, no
    quantization, shard suffix or head words, lower case."""
    base = name.rsplit("/", 1)[-1].lower().removesuffix(".gguf")
    base = base.removeprefix("mtp-")
    base = _QUANT.sub("", base)
    base = re.sub(r"-\d{5}-of-\d{5}$", "", base)
    base = re.sub(r"(?<![a-z0-9])(?:mtp|assistant|draft(?:er)?)(?![a-z0-9])", "", base)
    return re.sub(r"[-_. ]+", "-", base).strip("-")


def head_for(groups: list[FileGroup], target: FileGroup) -> FileGroup | None:
    """The repo's head or drafter most likely made for ``target``: the one whose name
    shares the most with the target's (a repo may hold the drafters of several sizes),
    then the smallest (a drafter's quantization matters least). A hint only: pairing
    reads both headers before anything is downloaded."""
    heads = [g for g in groups if g.head and g.complete]
    if not heads:
        return None
    want = _stem(target.name)

    def shared(g: FileGroup) -> int:
        have = _stem(g.name)
        n = 0
        while n < min(len(want), len(have)) and want[n] == have[n]:
            n += 1
        return n

    return max(heads, key=lambda g: (shared(g), -g.size))
