"""Shard sets: ``<prefix>-00001-of-00003.gguf`` and friends.

llama.cpp rebuilds the other shard names from shard 1's name and ``split.count``; this
module does the same, so a set is found (and checked) exactly as llama.cpp will load it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import GGUFError
from engine.gguf.constants import SHARD_PATTERN, SPLIT_COUNT, shard_name
from engine.gguf.reader import GGUFHeader, read_header


@dataclass(frozen=True)
class ShardName:
    prefix: str
    no: int  # 1-based
    count: int


def parse_shard_name(path: str | Path) -> ShardName | None:
    m = SHARD_PATTERN.match(Path(path).name)
    if not m:
        return None
    return ShardName(m["prefix"], int(m["no"]), int(m["count"]))


def shard_paths(first: str | Path, count: int) -> list[Path]:
    """Paths of all shards of the set whose shard 1 is ``first``."""
    p = Path(first)
    name = parse_shard_name(p)
    if name is None:
        return [p]
    return [p.with_name(shard_name(name.prefix, i, count)) for i in range(1, count + 1)]


@dataclass
class ModelSet:
    """A model as llama.cpp sees it: one file, or shard 1 plus its siblings."""

    headers: list[GGUFHeader]

    @property
    def first(self) -> GGUFHeader:
        return self.headers[0]

    @property
    def paths(self) -> list[Path]:
        return [h.path for h in self.headers]

    @property
    def total_size(self) -> int:
        return sum(h.file_size for h in self.headers)

    def all_tensors(self):
        for h in self.headers:
            for t in h.tensors:
                yield h, t


def open_set(path: str | Path) -> ModelSet:
    """Parse the headers of ``path`` and, when it is shard 1 of a set, of every sibling.

    A shard other than the first, or a missing sibling, is an error that names the file
    to pick instead / the file that is missing.
    """
    p = Path(path)
    first = read_header(p)
    name = parse_shard_name(p)
    count_kv = first.kvs.get(SPLIT_COUNT)
    if name is None and count_kv is None:
        return ModelSet([first])
    if name is not None and name.no != 1:
        raise GGUFError(
            f"this is shard {name.no} of {name.count}; open the first shard "
            f"({shard_name(name.prefix, 1, name.count)}) instead",
            file=str(p),
            code="not_first_shard",
        )
    count = (
        int(count_kv.value) if count_kv is not None and isinstance(count_kv.value, int) else (name.count if name else 1)
    )
    if name is not None and count != name.count:
        raise GGUFError(
            f"split.count is {count} but the file name says {name.count} shards",
            file=str(p),
            code="split_count_mismatch",
        )
    if name is None:
        if count != 1:
            raise GGUFError(
                f"split.count is {count} but the file name does not follow <prefix>-00001-of-{count:05d}.gguf, "
                "so llama.cpp cannot find the other shards",
                file=str(p),
                code="bad_shard_name",
            )
        return ModelSet([first])
    headers = [first]
    for sp in shard_paths(p, count)[1:]:
        if not sp.exists():
            raise GGUFError(f"shard {sp.name} of this set is missing", file=str(p), code="missing_shard")
        headers.append(read_header(sp))
    return ModelSet(headers)
