"""A loaded projector (``mmproj-*.gguf``): libmtmd turning a prompt's text and media into
prompt tokens and media embeddings.

:meth:`Projector.prompt` takes a rendered prompt whose media stand as markers
(:data:`MARKER`, random per process so no user text can forge one) and the media in
their order, and gives the prompt's tokens: text tokens as they are, and each media chunk
as a run of one negative id (:attr:`MediaChunk.token`, from the media's content hash) as
long as its embedding rows — so a prompt is still a list of ints, the common prefix of
two prompts stops at the first media that differs, and the same picture in the next turn
matches the cached one. The chunk carries its embeddings (encoded once per picture and
kept in a small cache by content hash, so a conversation's next turn does not encode its
pictures again) and its positions.

Positions are llama.cpp's: M-RoPE images (Qwen-VL) place row ``i`` at (``t``, ``y``,
``x``) = (``p0``, ``p0 + i // nx``, ``p0 + i % nx``) as libmtmd does, and the text after
one resumes at ``p0 + n_pos`` (``max(nx, ny)``), fewer positions than rows; every other
chunk takes one position a row. A session keeps rows and positions apart
(:class:`~engine.runtime.media.rows.Positions`): rollback, the prompt cache and
the MTP head count rows.

Threads: libmtmd's context is used by one thread at a time (:attr:`Projector.lock`);
preparing a request (any thread) tokenizes and encodes; the engine thread only reads a
chunk's arrays. The encoder's CPU threads belong to the thread that calls it and go on
costing CPU after it returns while that thread lives (measured: an encode on a
long-lived thread took every later decode of the demo from 3,550 to 280 tok/s on 2
cores), so :meth:`Projector.prompt` runs libmtmd on a thread of its own that ends with
the call. Closed on the thread that loaded it, before its model.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import InvalidRequestError, ModelLoadError
from engine.runtime.llama.lib import default_threads, mtmd
from engine.runtime.llama.owned import OwnedPtr
from engine.runtime.media import Media

log = logging.getLogger(__name__)

#: the marker rendering puts where a media part stands (random per process)
MARKER = f"<__media_{secrets.token_hex(6)}__>"
#: bytes of embeddings kept for the next turn, by content hash (a 1080p picture on a
#: Qwen3-VL-class model is ~2,000 rows of 16-20k floats: 130-170 MB)
ENCODED_BUDGET = 512 << 20
#: where libmtmd would look for ffmpeg: nowhere. Bytes stb_image cannot decode fall through
#: to its video decoder, which would hand a request's bytes to ffmpeg/ffprobe
_NO_FFMPEG = b"/nonexistent/mtp-studio-has-no-ffmpeg"
#: libmtmd's chunk types
_TEXT, _IMAGE, _AUDIO = 0, 1, 2


def media_token(digest: str) -> int:
    """The negative id a media chunk's positions hold in a prompt: from its content hash,
    so the same picture gives the same run and a different one differs at its first row."""
    return -2 - int(digest[:7], 16)  # -1 is an MTP hole (engine.runtime.decode.entries.HOLE)


@dataclass(frozen=True, eq=False)
class MediaChunk:
    """One picture's (or clip's) rows of a prompt: its embeddings and their positions."""

    token: int  # the negative id its rows hold in the prompt
    digest: str
    kind: str  # "image" | "audio"
    embd: np.ndarray = field(repr=False)  # (n_tokens, n_embd_inp) float32, read-only
    #: positions relative to the chunk's first row, section-major (sections, n_tokens):
    #: 4 sections under M-RoPE (t, y, x, z), else 1
    rel_pos: np.ndarray = field(repr=False)
    #: the chunk is decoded with non-causal attention, in one micro-batch (Gemma's vision)
    non_causal: bool = False
    #: positions the chunk takes (libmtmd's n_pos): an M-RoPE picture takes max(nx, ny),
    #: fewer than its rows; every other chunk one a row
    n_pos: int = 0

    @property
    def shift(self) -> int:
        """How many fewer positions than rows the chunk takes."""
        return self.n_tokens - self.n_pos if self.n_pos else 0

    @property
    def n_tokens(self) -> int:
        return len(self.embd)

    def positions(self, p0: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Section-major positions of rows ``start..stop`` when the chunk begins at ``p0``."""
        rel = self.rel_pos[:, start:stop]
        out = rel + np.int32(p0)
        if len(out) == 4 and self.kind == "image":  # a picture's fourth section stays 0 (libmtmd: "unused")
            out[3] = rel[3]
        return np.ascontiguousarray(out, dtype=np.int32)


def _slice_token(digest: str, j: int) -> int:
    """The id of slice ``j`` of a media (a tiling projector's overview and tiles, a long
    clip's pieces, the same picture met again in one prompt: each has rows of its own)."""
    return media_token(digest if j == 0 else hashlib.sha256(f"{digest}:{j}".encode()).hexdigest())


@dataclass(frozen=True)
class MediaPrompt:
    """A prompt's tokens (media rows as their chunk's negative id) and its media chunks."""

    tokens: list[int]
    chunks: dict[int, MediaChunk]


class Projector(OwnedPtr):
    """libmtmd's context for one projector file and the text model it feeds."""

    _free_priority = 0  # before the model it was made for
    _what = "projector"

    @staticmethod
    def _free(ptr) -> None:
        mtmd().mtmd_free(ptr)

    def __init__(self, path: Path, model, *, use_gpu: bool = True, n_threads: int | None = None):
        self._own()
        M = mtmd()
        self.path = Path(path)
        self.model = model
        self._marker = MARKER.encode()
        params = M.mtmd_context_params_default()
        params.use_gpu = bool(use_gpu)
        params.print_timings = False
        params.n_threads = n_threads or default_threads()
        params.media_marker = self._marker
        params.warmup = False
        ptr = M.mtmd_init_from_file(str(self.path).encode(), model.ptr, params)
        if not ptr:
            raise ModelLoadError(
                f"llama.cpp could not load the projector {self.path.name} for {Path(model.path).name}: "
                "it is damaged or was made for another model; download the mmproj file from the model's own repository"
            )
        self._ptr = ptr
        self.vision = bool(M.mtmd_support_vision(ptr))
        self.audio = bool(M.mtmd_support_audio(ptr))
        self.mrope = bool(M.mtmd_decode_use_mrope(ptr))
        self.n_embd = int(mtmd_n_embd_inp(model))
        #: one thread at a time in libmtmd (its eval helpers are not thread-safe)
        self.lock = threading.Lock()
        self._encoded: OrderedDict[tuple[str, int], tuple[np.ndarray, np.ndarray, bool]] = OrderedDict()
        self._encoded_bytes = 0
        #: media chunks encoded so far (one met again while its embeddings are kept is not)
        self.encodes = 0

    @property
    def modalities(self) -> tuple[str, ...]:
        return (*(("vision",) if self.vision else ()), *(("audio",) if self.audio else ()))

    # ------------------------------------------------------------------ prompt
    def prompt(self, text: str, media: list[Media], *, encode: bool = True) -> MediaPrompt:
        """``text`` (its media at :data:`MARKER`, one per item of ``media``, in order) as
        prompt tokens and media chunks (``encode`` False: only their rows are counted, the
        chunks carry no embeddings). Raises InvalidRequestError for media libmtmd cannot
        read or this projector does not take."""
        if text.count(MARKER) != len(media):
            raise InvalidRequestError(
                f"the prompt holds {text.count(MARKER)} media markers for {len(media)} media: "
                "the chat template dropped or repeated a picture"
            )
        for m in media:
            if m.kind == "image" and not self.vision or m.kind == "audio" and not self.audio:
                raise InvalidRequestError(
                    f"this model's projector ({self.path.name}) does not take {m.kind}: "
                    f"it takes {' and '.join(self.modalities) or 'nothing'}"
                )
        return _on_own_thread(lambda: self._prompt(text, media, encode))

    def _prompt(self, text: str, media: list[Media], encode: bool) -> MediaPrompt:
        M = mtmd()
        with self.lock:
            bitmaps: list = []
            chunks = M.mtmd_input_chunks_init()
            try:
                for i, m in enumerate(media):
                    bitmaps.append(self._bitmap(m, i))
                data = text.encode()
                inp = M.mtmd_input_text(data, len(data), False, True)
                arr = (M.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
                rc = M.mtmd_tokenize(self.ptr, chunks, ctypes.byref(inp), arr, len(bitmaps))
                if rc != 0:
                    why = {1: "the markers and media do not match", 2: "a picture could not be preprocessed"}
                    raise InvalidRequestError(f"the media could not be prepared: {why.get(rc, f'error {rc}')}")
                return self._read(chunks, encode)
            finally:
                M.mtmd_input_chunks_free(chunks)
                for b in bitmaps:
                    M.mtmd_bitmap_free(b)

    def _bitmap(self, m: Media, i: int):
        M = mtmd()
        buf = (ctypes.c_uint8 * len(m.data)).from_buffer_copy(m.data)
        opt = M.mtmd_helper_init_opt_default()
        opt.video_params.ffmpeg_bin_dir = _NO_FFMPEG
        b = M.mtmd_helper_bitmap_init_from_buf(self.ptr, buf, len(m.data), False, opt)
        if not b:
            raise InvalidRequestError(
                f"media {i + 1} ({m.mime}, {len(m.data)} bytes) could not be decoded: it is damaged or not "
                "a format llama.cpp reads; send a PNG or JPEG"
            )
        M.mtmd_bitmap_set_id(b, m.digest.encode())
        return b

    def _read(self, chunks, encode: bool) -> MediaPrompt:
        """The prompt of libmtmd's ``chunks``. A media may give several chunks (a tiling
        projector's overview and tiles, a long clip's pieces), each known by its media's id
        (the content hash set on its bitmap) and its place among that media's chunks."""
        M = mtmd()
        tokens: list[int] = []
        out: dict[int, MediaChunk] = {}
        seen: dict[str, int] = {}
        for i in range(M.mtmd_input_chunks_size(chunks)):
            c = M.mtmd_input_chunks_get(chunks, i)
            kind = M.mtmd_input_chunk_get_type(c)
            if kind == _TEXT:
                n = ctypes.c_size_t(0)
                ptr = M.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n))
                tokens.extend(ptr[: n.value])
                continue
            digest = (M.mtmd_input_chunk_get_id(c) or b"").decode()
            j = seen[digest] = seen.get(digest, -1) + 1
            chunk = self._chunk(c, digest, j, "image" if kind == _IMAGE else "audio", encode)
            out[chunk.token] = chunk
            tokens.extend([chunk.token] * chunk.n_tokens)
        return MediaPrompt(tokens, out)

    def _chunk(self, c, digest: str, j: int, kind: str, encode: bool) -> MediaChunk:
        """Chunk ``c`` (slice ``j`` of the media ``digest``): encoded now, or its
        embeddings from the cache (``encode`` False: none, only its rows)."""
        M = mtmd()
        n = int(M.mtmd_input_chunk_get_n_tokens(c))
        key = (digest, j)
        got = self._encoded.get(key)
        if got is not None and len(got[0]) == n:
            self._encoded.move_to_end(key)
            embd, rel, non_causal = got
        elif not encode:
            embd, rel, non_causal = np.empty((n, 0), np.float32), self._rel_positions(c, kind, n), False
        else:
            if M.mtmd_encode_chunk(self.ptr, c) != 0:
                raise InvalidRequestError(f"the projector could not encode this {kind}")
            ptr = M.mtmd_get_output_embd(self.ptr)
            embd = np.ctypeslib.as_array(ptr, shape=(n, self.n_embd)).copy()
            embd.setflags(write=False)
            self.encodes += 1
            rel = self._rel_positions(c, kind, n)
            non_causal = bool(M.mtmd_decode_use_non_causal(self.ptr, c))
            self._keep(key, (embd, rel, non_causal))
        n_pos = int(M.mtmd_input_chunk_get_n_pos(c))
        return MediaChunk(_slice_token(digest, j), digest, kind, embd, rel, non_causal, n_pos)

    def _keep(self, key: tuple[str, int], entry: tuple[np.ndarray, np.ndarray, bool]) -> None:
        """Keep a chunk's embeddings for the next turn, the oldest dropped past the budget."""
        old = self._encoded.pop(key, None)
        if old is not None:
            self._encoded_bytes -= old[0].nbytes
        self._encoded[key] = entry
        self._encoded_bytes += entry[0].nbytes
        while self._encoded_bytes > ENCODED_BUDGET and len(self._encoded) > 1:
            _, dropped = self._encoded.popitem(last=False)
            self._encoded_bytes -= dropped[0].nbytes

    def _rel_positions(self, c, kind: str, n: int) -> np.ndarray:
        """Positions of the chunk's rows from its first (section-major), as libmtmd lays them."""
        M = mtmd()
        seq = np.arange(n, dtype=np.int32)
        if not self.mrope:
            return seq[None, :].copy()
        if kind != "image":  # audio under M-RoPE: the same running position in every section
            return np.stack([seq, seq, seq, seq])
        img = M.mtmd_input_chunk_get_tokens_image(c)
        rel = np.empty((4, n), np.int32)
        for i in range(n):
            p = M.mtmd_image_tokens_get_decoder_pos(img, 0, i)
            rel[0, i], rel[1, i], rel[2, i], rel[3, i] = p.t, p.y, p.x, p.z
        rel.setflags(write=False)
        return rel


def _on_own_thread(fn):
    """``fn()`` on a thread that ends with it (its encoder threads end with it); what it
    raises is raised here."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the caller
            out["error"] = e

    t = threading.Thread(target=run, name="mtp-media")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def mtmd_n_embd_inp(model) -> int:
    """The width of the rows the text model takes as input embeddings (a projector's output)."""
    from engine.runtime.llama.lib import llama

    return int(llama().llama_model_n_embd_inp(model.ptr))
