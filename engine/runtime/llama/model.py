"""A loaded ``llama_model``: vocabulary, tokenizer and metadata.

Lives on the engine thread (llama.cpp objects are never shared between threads).
Loading reports progress and can be cancelled through llama.cpp's progress callback,
whose ``False`` return aborts the load.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from pathlib import Path

from engine.errors import Cancelled, ModelLoadError
from engine.runtime.llama import repack
from engine.runtime.llama.lib import llama
from engine.runtime.llama.owned import OwnedPtr


class Model(OwnedPtr):
    """Owns one ``llama_model`` pointer; :meth:`close` frees it (idempotent)."""

    _free_priority = 1  # after the contexts made from it
    _what = "model"

    @staticmethod
    def _free(ptr) -> None:
        llama().llama_model_free(ptr)

    def __init__(self, ptr, path: Path, load_mtp: bool):
        self._own()
        L = llama()
        self._ptr = ptr
        self.path = path
        self.load_mtp = load_mtp
        self._vocab = L.llama_model_get_vocab(ptr)
        self.n_vocab = int(L.llama_vocab_n_tokens(self._vocab))
        self.n_embd = int(L.llama_model_n_embd(ptr))
        #: width of the hidden rows MTP reads and feeds (wider than n_embd with DeepSeek V4's
        #: hyper-connections; an assistant's is its target's hidden size)
        self.n_embd_out = int(L.llama_model_n_embd_out(ptr))
        self.n_ctx_train = int(L.llama_model_n_ctx_train(ptr))
        self.n_layer = int(L.llama_model_n_layer(ptr))
        self.n_layer_nextn = int(L.llama_model_n_layer_nextn(ptr))
        self.is_recurrent = bool(L.llama_model_is_recurrent(ptr) or L.llama_model_is_hybrid(ptr))
        #: sliding-window attention's window (0: none). A saved state of such a model holds
        #: only the window's cells (llama.cpp's state_write drops the masked ones)
        self.n_swa = int(L.llama_model_n_swa(ptr))
        self.eos = int(L.llama_vocab_eos(self._vocab))
        self.bos = int(L.llama_vocab_bos(self._vocab))
        self.pad = int(L.llama_vocab_pad(self._vocab))
        self.add_bos = bool(L.llama_vocab_get_add_bos(self._vocab))
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        #: llguidance tokenizers by end-token set (engine.runtime.llama.vocab)
        self.grammar_tokenizers: dict = {}

    @property
    def restores_cut_back(self) -> bool:
        """A state restored from a snapshot can be cut back to any earlier position: not
        with recurrent state (it keeps no history), nor with sliding-window attention (a
        snapshot holds only the window's cells). The prompt cache plans by it."""
        return not self.is_recurrent and self.n_swa == 0

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        load_mtp: bool,
        n_gpu_layers: int = -1,
        progress: Callable[[float], None] | None = None,
        cancel: threading.Event | None = None,
        metadata_only: bool = False,
        use_extra_bufts: bool | None = None,
        placement=None,
    ) -> Model:
        """Load ``path`` (which must already be validated: llama.cpp can abort on bad
        input). Raises :class:`Cancelled` when ``cancel`` is set during the load.
        ``metadata_only`` allocates no tensor data (a fast structural check);
        ``use_extra_bufts`` is llama.cpp's CPU weight repacking (extra buffer types such as
        AMX); None: as this machine's verdict says (:mod:`engine.runtime.llama.repack`,
        probed once per CPU and build), False: off, the known-safe fallback when its
        kernels crash."""
        if use_extra_bufts is None:
            use_extra_bufts = False if metadata_only else repack.allowed()  # no data, no kernels
        repack.simulate_crash_if_asked(use_extra_bufts and not metadata_only)
        L = llama()
        params = L.llama_model_default_params()
        params.load_mtp = bool(load_mtp)
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = bool(use_extra_bufts)
        if placement is not None:
            placement.apply(params)  # its arrays outlive the call: the caller holds them
        if metadata_only:
            params.no_alloc = True
            params.load_mode = L.LLAMA_LOAD_MODE_NONE

        def on_progress(fraction: float, _user) -> bool:
            if progress is not None:
                try:
                    progress(float(fraction))
                except Exception:  # a GUI callback must never break a load
                    pass
            return not (cancel is not None and cancel.is_set())

        cb = L.llama_progress_callback(on_progress)
        params.progress_callback = cb
        ptr = L.llama_model_load_from_file(str(path).encode("utf-8"), params)
        if not ptr:
            if cancel is not None and cancel.is_set():
                raise Cancelled("model load cancelled")
            raise ModelLoadError(
                f"llama.cpp could not load {Path(path).name}. The file passed validation, so it may need a "
                "newer backend or be damaged; run `mtp-studio validate --probe` on it for details."
            )
        return cls(ptr, Path(path), load_mtp)

    # --------------------------------------------------------------- metadata
    def meta(self, key: str) -> str | None:
        L = llama()
        buf = ctypes.create_string_buffer(4096)
        n = L.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            L.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        raw = llama().llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None

    @property
    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama().llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    # -------------------------------------------------------------- tokenizer
    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        L = llama()
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def prompt_tokens(self, text: str) -> list[int]:
        """Tokens of a raw prompt as the model expects it: with the BOS token first when
        the vocabulary asks for one (Gemma and Llama do; without it Gemma degenerates
        into repetition at once), and never two of them."""
        return self.with_bos(self.tokenize(text))

    def with_bos(self, tokens: list[int]) -> list[int]:
        if self.add_bos and self.bos >= 0 and tokens[:1] != [self.bos]:
            return [self.bos, *tokens]
        return tokens

    def piece(self, token: int) -> bytes:
        """Bytes of one token as it appears in generated text (control tokens render empty).
        Any thread: each call reads into a buffer of its own (the library call releases
        the GIL), and the cache only ever holds a token's own bytes."""
        p = self._pieces.get(token)
        if p is None:
            L = llama()
            buf = ctypes.create_string_buffer(64)
            n = L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            p = buf.raw[:n]
            self._pieces[token] = p
        return p

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        v = self._eog.get(token)
        if v is None:
            v = bool(llama().llama_vocab_is_eog(self._vocab, token))
            self._eog[token] = v
        return v

    def token_text(self, token: int) -> str:
        """The vocabulary entry (e.g. ``<|im_end|>``), for display."""
        raw = llama().llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""
