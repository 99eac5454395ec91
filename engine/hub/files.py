"""Reading GGUF file names on the Hub: quantization, shard sets, MTP heads, projectors.

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


def is_projector_name(filename: str) -> bool:
    """A multimodal projector by its name: ``mmproj`` in the file's name, the word
    llama.cpp's downloader looks for (``common/download.cpp``: ``gguf_filename_is_model``
    leaves such files out of the models, ``find_best_mmproj`` picks one of them). The
    header (``general.architecture`` ``clip``) is the truth; the name is what a listing
    can be sorted by."""
    return "mmproj" in filename.rsplit("/", 1)[-1].lower()


def modality_hint(filename: str) -> tuple[str, ...]:
    """What a projector's name says it reads (``vision``, ``audio``); empty when the name
    says neither (most: ``mmproj-F16.gguf``), and then only its header can tell."""
    name = filename.rsplit("/", 1)[-1].lower()
    return tuple(
        m for m, words in (("vision", ("vision", "image")), ("audio", ("audio",))) if any(w in name for w in words)
    )


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
    #: a multimodal projector, read with a model and never loaded alone: by its name
    #: (``mmproj``) unless given
    projector: bool | None = None

    def __post_init__(self) -> None:
        if self.projector is None:
            self.projector = is_projector_name(self.name)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def complete(self) -> bool:
        return len(self.files) == self.expected_shards


def group_gguf_files(files: list[RemoteFile]) -> list[FileGroup]:
    """GGUF files of a repo grouped by shard set: models, then projectors, then MTP heads,
    each sorted by quantization and name."""
    singles: list[FileGroup] = []
    sets: dict[tuple[str, int], list[RemoteFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        s = parse_shard_name(f.path)
        if s is None:
            proj = is_projector_name(f.path)
            singles.append(FileGroup(f.path, [f], quant_of(f.path), is_head_name(f.path) and not proj))
        else:
            folder = f.path.rsplit("/", 1)[0] + "/" if "/" in f.path else ""
            sets.setdefault((folder + s.prefix, s.count), []).append(f)
    groups = list(singles)
    for (prefix, count), members in sets.items():
        members.sort(key=lambda f: f.path)
        proj = is_projector_name(prefix)
        groups.append(
            FileGroup(
                members[0].path, members, quant_of(prefix), is_head_name(prefix) and not proj, count, projector=proj
            )
        )
    groups.sort(key=lambda g: (g.head, g.projector, g.quant or "~", g.name))
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


#: of projectors as close to a model's quantization as each other, the one taken: F16 runs
#: on every backend, BF16 not on all (llama.cpp keeps the first listed of equals: in a
#: listing sorted by name, unsloth's ``mmproj-BF16`` before ``mmproj-F16``)
PROJECTOR_PREFERENCE: tuple[str, ...] = ("F16", "BF16", "F32")


def quant_bits(filename: str) -> int:
    """The bits a file name's quantization says (``Q4_K_M`` 4, ``BF16`` 16, ``F32`` 32,
    ``MXFP4`` 4), 0 when it names none: llama.cpp's ``extract_quant_bits``."""
    q = quant_of(filename)
    if q is None:  # llama.cpp's tag: the last word of the name, after - or .
        stem = re.sub(r"-\d{5}-of-\d{5}$", "", filename.rsplit("/", 1)[-1].removesuffix(".gguf"))
        m = re.search(r"[-.]([A-Za-z0-9_]+)$", stem)
        q = m.group(1) if m else ""
    digits = re.search(r"\d+", q.removeprefix("UD-"))
    return int(digits.group()) if digits else 0


def projector_for(groups: list[FileGroup], model: FileGroup) -> FileGroup | None:
    """The repo's projector for ``model``, the way llama.cpp's ``-hf`` picks one
    (``common/download.cpp``, ``find_best_sibling`` with ``mmproj``): of the complete
    projector files whose folder is ``model``'s folder or one above it, the deepest; then
    the one whose quantization's bits are closest to the model's (an F16 or BF16 model
    gets a 16-bit projector, a Q8_0 model a Q8_0 one where the repo has it); then F16,
    BF16, F32, others (:data:`PROJECTOR_PREFERENCE`); then by name. None: the repo holds
    none for it. A hint by name: the headers are checked before anything is downloaded
    (the projector's output width must be the model's input width)."""
    if model.projector or model.head:
        return None
    folders = model.name.split("/")[:-1]
    bits = quant_bits(model.name)

    def key(g: FileGroup):
        pref = PROJECTOR_PREFERENCE.index(g.quant) if g.quant in PROJECTOR_PREFERENCE else len(PROJECTOR_PREFERENCE)
        return (-(len(g.name.split("/")) - 1), abs(quant_bits(g.name) - bits), pref, g.name)

    fits = [
        g
        for g in groups
        if g.projector and g.complete and g.name.split("/")[:-1] == folders[: len(g.name.split("/")) - 1]
    ]
    return min(fits, key=key, default=None)
