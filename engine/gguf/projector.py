"""What a multimodal projector ("mmproj") GGUF is, from its header alone, and whether it
fits a text model.

A projector (``general.architecture`` ``clip``) holds libmtmd's image and/or audio encoder,
whose embeddings a text model reads in place of tokens. Nothing here loads llama.cpp: the
checks libmtmd makes are repeated on headers, so a wrong file is refused in words before
libmtmd throws, or aborts the process on a key of the wrong type:

- :func:`read_projector` → :class:`ProjectorFacts` (types, modalities, output width as
  ``clip_n_mmproj_embd`` computes it from tensor shapes, image and patch size);
- :func:`pair_problem`: the width ``mtmd_init_from_file`` compares with the text model's
  ``llama_model_n_embd_inp``, read from the model's header;
- :func:`validate_projector`: a validation :class:`~engine.gguf.report.Report` of the file.

Called by :mod:`engine.cli.gguf`, :mod:`engine.gguf.inspect`, the hub and the media runtime.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.errors import GGUFError, ModelNotFoundError
from engine.gguf.constants import ValueType
from engine.gguf.reader import GGUFHeader, read_header
from engine.gguf.report import Report
from engine.gguf.validate import check_file

PROJECTOR_ARCH = "clip"

#: projector types libmtmd 0.3.36 knows (clip-impl.h ``PROJECTOR_TYPE_NAMES``)
KNOWN_TYPES = frozenset(
    "mlp ldp ldpv2 resampler adapter qwen2vl_merger qwen2.5vl_merger qwen3vl_merger ling3vl step3vl gemma3 "
    "gemma3nv gemma3na gemma4v gemma4a gemma4uv gemma4ua phi4 idefics3 pixtral ultravox internvl llama4 qwen2a "
    "qwen3a glma qwen2.5o voxtral meralion musicflamingo lfm2 kimivl paddleocr lightonocr cogvlm janus_pro "
    "dots_ocr dots3note_v dots3note_a deepseekocr deepseekocr2 deepseek4v lfm2a glm4v glm5v youtuvl yasa2 kimik25 "
    "nemotron_v2_vl exaone4_5 hunyuanvl minicpmv4_6 granite_speech mimovl minimax_m3 granite4_vision mimo_audio "
    "parakeet qwen3tts_spkenc qwen3tts_gen pockettts_spkenc pockettts_gen muse-glimmer".split()
)


def _same(where: tuple[str, int], *types: str) -> dict[str, tuple[str, int]]:
    return dict.fromkeys(types, where)


#: type → (tensor, ggml axis) whose size is the embedding width (clip.cpp
#: ``clip_n_mmproj_embd``); other known types fall back to ``projection_dim``
WIDTH_TENSOR: dict[str, tuple[str, int]] = {
    **_same(("mm.2.weight", 1), "mlp", "phi4", "pixtral", "lightonocr", "dots_ocr", "dots3note_v", "muse-glimmer"),
    **_same(("mm.2.weight", 1), "mimovl", "lfm2", "kimivl", "paddleocr", "kimik25", "yasa2", "deepseek4v"),
    **_same(("mm.2.bias", 0), "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "ling3vl"),
    **_same(("mm.2.bias", 0), "exaone4_5", "youtuvl"),
    **_same(("mm.input_projection.weight", 0), "gemma3", "gemma3nv"),
    **_same(("mm.input_projection.weight", 1), "gemma4v", "gemma4uv"),
    **_same(("mm.a.input_projection.weight", 1), "gemma4a", "gemma4ua"),
    **_same(("mm.a.mlp.2.weight", 1), "ultravox", "voxtral", "musicflamingo", "qwen3a", "glma", "mimo_audio"),
    **_same(("mm.model.fc.weight", 1), "idefics3", "llama4", "step3vl", "hunyuanvl"),
    **_same(("mm.model.mlp.3.weight", 1), "internvl", "nemotron_v2_vl"),
    **_same(("mm.down.weight", 1), "glm4v", "glm5v", "minicpmv4_6"),
    "ldp": ("mm.model.mb_block.1.block.2.1.bias", 0),
    "ldpv2": ("mm.model.peg.0.bias", 0),
    "resampler": ("resampler.proj.weight", 0),
    "adapter": ("adapter.linear.dense_4h_to_h.weight", 1),
    "minimax_m3": ("mm.merger.fc2.bias", 0),
    "janus_pro": ("mm.1.bias", 0),
    "qwen2a": ("mm.a.fc.weight", 1),
    "dots3note_a": ("mm.a.mlp.3.weight", 1),
    "meralion": ("mm.a.mlp.3.weight", 1),
}

#: keys clip.cpp reads with a typed getter: a value of another type aborts the process
#: (gguf.cpp ``get_val`` asserts); ``{m}`` is vision or audio
_TYPED_KEYS: dict[str, ValueType] = {
    key: vtype
    for vtype, keys in (
        (ValueType.STRING, "general.name general.description clip.projector_type"),
        (ValueType.STRING, "clip.vision.projector_type clip.audio.projector_type"),
        (ValueType.BOOL, "clip.has_vision_encoder clip.has_audio_encoder clip.has_gen_audio_encoder"),
        (ValueType.BOOL, "clip.use_gelu clip.use_silu"),
        (ValueType.UINT32, "clip.vision.image_size clip.vision.patch_size clip.vision.spatial_merge_size"),
        (ValueType.UINT32, "clip.vision.projector.scale_factor clip.audio.num_mel_bins"),
    )
    for key in keys.split()
}
_MODALITY_KEYS = {
    "embedding_length": ValueType.UINT32,
    "attention.head_count": ValueType.UINT32,
    "feed_forward_length": ValueType.UINT32,
    "block_count": ValueType.UINT32,
    "projection_dim": ValueType.UINT32,
    "attention.layer_norm_epsilon": ValueType.FLOAT32,
}
_OPTIONAL_MODALITY_KEYS = {"attention.head_count_kv": ValueType.UINT32, "attention.head_dim": ValueType.UINT32}


@dataclass(frozen=True)
class ProjectorFacts:
    """What a projector's header says. ``output_width``: the width of the embeddings it
    makes, which must equal its text model's ``n_embd_inp``. ``image_size`` /
    ``patch_size``: the vision encoder's (None without one)."""

    path: Path
    projector_type: str | None
    audio_projector_type: str | None
    vision: bool
    audio: bool
    output_width: int
    image_size: int | None = None
    patch_size: int | None = None
    name: str | None = None

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(m for m, on in (("vision", self.vision), ("audio", self.audio)) if on)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"path": str(self.path), "modalities": list(self.modalities)}


def _error(path: Path, message: str, code: str) -> GGUFError:
    e = GGUFError(message, code=code)
    e.file = str(path)
    return e


def _header(path: str | Path, what: str) -> GGUFHeader:
    p = Path(path)
    try:
        return read_header(p)
    except ModelNotFoundError:
        raise ModelNotFoundError(f"{what} not found: {p}. Check the path or download it again.") from None
    except GGUFError as e:
        where = f" at offset {e.offset}" if e.offset is not None else ""
        raise _error(p, f"{p.name} cannot be read as a GGUF {what.lower()}: {e.bare_message}{where}", e.code) from None


def is_projector_header(h: GGUFHeader) -> bool:
    return h.architecture == PROJECTOR_ARCH or any(f"clip.has_{m}_encoder" in h.kvs for m in ("vision", "audio"))


def is_projector(path: str | Path) -> bool:
    """Whether ``path`` is a readable GGUF of architecture ``clip`` (or with an encoder key)."""
    try:
        return is_projector_header(read_header(path))
    except (GGUFError, ModelNotFoundError):
        return False


def key_problems(h: GGUFHeader) -> list[tuple[str, str]]:
    """``(code, message)`` for every key libmtmd would throw or abort on: a typed key of
    another type, a required key of an encoder missing."""
    out: list[tuple[str, str]] = []
    typed = dict(_TYPED_KEYS)
    for m in ("vision", "audio"):
        for suffix, t in (_MODALITY_KEYS | _OPTIONAL_MODALITY_KEYS).items():
            typed[f"clip.{m}.{suffix}"] = t
    for key, want in typed.items():
        kv = h.kvs.get(key)
        if kv is not None and kv.type != want:
            found = f"{key} must be {want.name.lower()}, found {kv.type.name.lower()}"
            out.append(("bad_key_type", f"{found}: llama.cpp would abort on it. Download the file again"))
    for m in ("vision", "audio"):
        kv = h.kvs.get(f"clip.has_{m}_encoder")
        if kv is None or kv.type != ValueType.BOOL or not kv.value:
            continue
        need = [f"clip.{m}.{s}" for s in _MODALITY_KEYS]
        need += ["clip.vision.image_size", "clip.vision.patch_size"] if m == "vision" else ["clip.audio.num_mel_bins"]
        for key in need:
            if key not in h.kvs:
                out.append(("missing_key", f"{key} is missing; libmtmd needs it to load the {m} encoder"))
    return out


def _types(h: GGUFHeader) -> tuple[str | None, str | None]:
    """(vision type, audio type) as clip.cpp picks them: ``clip.projector_type`` first,
    then the modality's own key; the legacy ``qwen2.5o`` is split as libmtmd does."""
    shared = h.get("clip.projector_type")
    shared = shared if isinstance(shared, str) and shared else None
    out: list[str | None] = []
    for m in ("vision", "audio"):
        if h.get(f"clip.has_{m}_encoder") is not True:
            out.append(None)
            continue
        own = h.get(f"clip.{m}.projector_type")
        t = shared or (own if isinstance(own, str) and own else None)
        if t == "qwen2.5o":
            t = "qwen2.5vl_merger" if m == "vision" else "qwen2a"
        out.append(t or "")
    return out[0], out[1]


def _width(h: GGUFHeader, ptype: str, modality: str) -> int:
    """The embedding width of one encoder, as ``clip_n_mmproj_embd`` reads it."""
    name = h.path.name
    tensors = h.tensor_map
    if ptype == "mlp" and "mm.3.weight" in tensors:  # Yi-style LLaVA: clip.cpp switches to mlp_norm
        where: tuple[str, int] | None = ("mm.3.bias", 0)
    else:
        where = WIDTH_TENSOR.get(ptype)
    if where is None:
        dim = h.get(f"clip.{modality}.projection_dim")
        if isinstance(dim, int) and dim > 0:
            return dim
        raise _error(
            h.path,
            f"{name} ({ptype}) does not say how wide its embeddings are (no clip.{modality}.projection_dim); "
            "download the projector again",
            "no_output_width",
        )
    tensor, axis = where
    t = tensors.get(tensor)
    if t is None or len(t.dims) <= axis:
        raise _error(
            h.path,
            f"{name} lacks tensor {tensor}, which a {ptype} projector needs: the file is incomplete or damaged; "
            "download it again",
            "missing_tensor",
        )
    width = int(t.dims[axis])
    if ptype == "qwen3vl_merger":  # main path + one path per deepstack layer (clip.cpp)
        blocks = h.get("clip.vision.block_count")
        n = blocks if isinstance(blocks, int) else 0
        width *= 1 + sum(f"v.deepstack.{il}.fc1.weight" in tensors for il in range(n))
    return width


def facts_of(h: GGUFHeader) -> ProjectorFacts:
    """:class:`ProjectorFacts` of a parsed header. Raises ``GGUFError`` with words."""
    name = h.path.name
    if not is_projector_header(h):
        what = f"is a text model ({h.architecture})" if h.architecture else "has no general.architecture"
        raise _error(
            h.path,
            f"{name} {what}, not a multimodal projector (mmproj-*.gguf): give the mmproj file that was "
            "published with the model",
            "not_a_projector",
        )
    problems = key_problems(h)
    if problems:
        raise _error(h.path, f"{name}: {problems[0][1]}", problems[0][0])
    vtype, atype = _types(h)
    if vtype is None and atype is None:
        raise _error(
            h.path,
            f"{name} has no image or audio encoder (clip.has_vision_encoder and clip.has_audio_encoder are not "
            "true), so it cannot read images or sound: download the model's mmproj file again",
            "no_encoder",
        )
    for m, t in (("vision", vtype), ("audio", atype)):
        if t == "":
            raise _error(
                h.path,
                f"{name} has a {m} encoder but no projector type (clip.projector_type or clip.{m}.projector_type): "
                "the file is incomplete; download it again",
                "missing_projector_type",
            )
        if t is not None and t not in KNOWN_TYPES:
            raise _error(
                h.path,
                f"{name} is a {t!r} projector, a type this version of llama.cpp does not know: update MTP Studio's "
                "llama.cpp backend, or use a projector made for a supported model",
                "unknown_projector_type",
            )
    widths = {m: _width(h, t, m) for m, t in (("vision", vtype), ("audio", atype)) if t is not None}
    if len(set(widths.values())) > 1:
        raise _error(
            h.path,
            f"{name}'s image encoder makes {widths['vision']}-wide embeddings but its audio encoder "
            f"{widths['audio']}-wide; llama.cpp refuses such a file: download it again",
            "width_mismatch",
        )
    image_size, patch_size = h.get("clip.vision.image_size"), h.get("clip.vision.patch_size")
    gname = h.get("general.name")
    return ProjectorFacts(
        path=h.path,
        projector_type=vtype,
        audio_projector_type=atype,
        vision=vtype is not None,
        audio=atype is not None,
        output_width=next(iter(widths.values())),
        image_size=image_size if vtype is not None and isinstance(image_size, int) else None,
        patch_size=patch_size if vtype is not None and isinstance(patch_size, int) else None,
        name=gname if isinstance(gname, str) else None,
    )


def data_problem(h: GGUFHeader) -> str | None:
    """Whether the tensor data the header describes lies within the file."""
    if not h.tensors:
        return None
    end = max(t.offset + t.nbytes for t in h.tensors)
    need = h.data_offset + end
    if need > h.file_size:
        return (
            f"{h.path.name} is truncated: its tensors end at byte {need} but the file has {h.file_size} bytes; "
            "download it again"
        )
    return None


def read_projector(path: str | Path) -> ProjectorFacts:
    """Facts of the projector at ``path``. Raises ``ModelNotFoundError`` or ``GGUFError``
    (not a GGUF, not a projector, no encoder, unknown or missing type, truncated)."""
    h = _header(path, "Projector")
    facts = facts_of(h)
    problem = data_problem(h)
    if problem:
        raise _error(h.path, problem, "truncated")
    return facts


# ----------------------------------------------------------------- text model side
def n_embd_inp(h: GGUFHeader) -> int | None:
    """A text model's input embedding width, as ``llama_hparams::n_embd_inp`` computes it:
    ``embedding_length``, × (1 + ``n_deepstack_layers``) for Qwen3-VL, a Gemma 4
    assistant's ``embedding_length_out``. None when the header does not say."""
    arch = h.architecture
    if not arch:
        return None
    if arch == "gemma4-assistant":
        out = h.get(f"{arch}.embedding_length_out")
        if isinstance(out, int) and out > 0:
            return out
    n = h.get(f"{arch}.embedding_length")
    if not isinstance(n, int) or isinstance(n, bool):
        return None
    if arch in ("qwen3vl", "qwen3vlmoe"):
        ds = h.get(f"{arch}.n_deepstack_layers")
        n *= 1 + (ds if isinstance(ds, int) else 0)
    return n


def pair_problem(model_path: str | Path, projector_path: str | Path) -> str | None:
    """None when the projector fits the text model (as ``mtmd_init_from_file`` checks it),
    else a sentence naming both files and what differs."""
    model, proj = Path(model_path), Path(projector_path)
    try:
        facts = read_projector(proj)
        h = _header(model, "Model")
    except (GGUFError, ModelNotFoundError) as e:
        return str(e)
    if is_projector_header(h):
        return f"{model.name} is a projector, not a text model: give the model file first and {proj.name} with it"
    width = n_embd_inp(h)
    if width is None:
        return (
            f"{model.name} does not state its embedding width ({h.architecture}.embedding_length), so "
            f"{proj.name} cannot be checked against it"
        )
    if width != facts.output_width:
        return (
            f"{proj.name} makes {facts.output_width}-wide embeddings but {model.name} takes {width}: "
            f"download the projector made for {model.name}"
        )
    return None


def _unnamed(message: str, name: str) -> str:
    """A message that starts with the file's name, for a report that names it already."""
    return "this file " + message[len(name) + 1 :] if message.startswith(name + " ") else message


def validate_projector(path: str | Path) -> tuple[Report, ProjectorFacts | None]:
    """Validate a projector file for ``mtp-studio validate``: the GGUF structure
    (:func:`engine.gguf.validate.check_file`), every bad key, else the first refusal of
    :func:`facts_of`. Unreadable files become report errors too; facts when it is valid."""
    p = Path(path)
    report = Report(files=[str(p)])
    try:
        h = _header(p, "Projector")
    except (GGUFError, ModelNotFoundError) as e:
        report.error(e.code, _unnamed(str(e), p.name), str(p))
        return report, None
    check_file(h, report)
    report.mtp = {"architecture": h.architecture, "kind": "projector"}
    problems = key_problems(h) if is_projector_header(h) else []
    for code, message in problems:
        report.error(code, message, str(p))
    if problems:
        return report, None
    try:
        facts = facts_of(h)
    except GGUFError as e:
        report.error(e.code, _unnamed(e.bare_message, p.name), str(p))
        return report, None
    return report, facts if report.valid else None
