"""A ``llama_context`` (target or MTP) with typed decode, logits and hidden rows.

Engine thread only. Views returned by :meth:`logits` and :meth:`hidden_rows` point into
llama.cpp's buffers and are overwritten by the next decode: copy what you keep.

The views are made once per buffer address, not per read: llama.cpp keeps its output
buffers between decodes, and making a numpy view of a ctypes pointer costs ~3 us, as
much as the argmax over a 4k-row vocabulary it serves. Each read still asks llama.cpp
for the buffer (it synchronises the backend and orders the rows), and a buffer that moved
gets a new view.
"""

from __future__ import annotations

import ctypes

import numpy as np

from engine.errors import ContextError, DecodeError
from engine.runtime.llama.batch import Batch
from engine.runtime.llama.lib import default_threads, ext, llama
from engine.runtime.llama.exact import EXACT_FLASH_ATTN, EXACT_KV_TYPE
from engine.runtime.llama.model import Model
from engine.runtime.llama.owned import OwnedPtr


#: llama.cpp's state flags: the whole sequence state, or (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
#: only its recurrent / sliding-window part
STATE_WHOLE, STATE_PARTIAL_ONLY = 0, 1


class Context(OwnedPtr):
    """Owns one ``llama_context``; :meth:`close` frees it (idempotent)."""

    _what = "context"

    @staticmethod
    def _free(ptr) -> None:
        llama().llama_free(ptr)

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_batch: int = 512,
        n_rs_seq: int = 0,
        mtp_target: Context | None = None,
        nextn_embeddings: bool = False,
        n_threads: int | None = None,
        exact: bool = False,
        offload_kqv: bool = True,
        n_outputs: int = 0,
        n_seq: int = 1,
        pooled: bool = False,
    ):
        self._own()
        L = llama()
        p = L.llama_context_default_params()
        if exact:
            # batch-invariant attention (engine.runtime.llama.exact): flash attention always, and a
            # quantized KV cache so one-token decodes never take the split-KV reduction
            p.flash_attn_type = EXACT_FLASH_ATTN
            p.type_k = p.type_v = EXACT_KV_TYPE
        # several sequences (engine.runtime.slots): a KV stream of n_ctx cells each, so one
        # never takes another's cells and attends over its own only
        p.n_ctx = n_ctx if pooled else n_ctx * n_seq
        p.n_batch = n_batch
        p.n_ubatch = n_batch  # >= max(K+1, n_rs_seq+2), or every decode asserts
        p.n_seq_max = n_seq
        p.kv_unified = n_seq == 1 or pooled  # pooled: the inputs of one decode share the cells
        # logit rows one decode may ask for (0: n_batch, llama.cpp's default). Each context
        # reserves n_vocab x n_outputs floats in its compute buffer: 1 GiB for nothing
        # on a 248k vocabulary at 512 when a decode reads at most depth + 1 rows
        p.n_outputs_max = n_outputs
        p.n_rs_seq = n_rs_seq
        threads = n_threads or default_threads()
        p.n_threads = threads
        p.n_threads_batch = threads
        p.no_perf = True
        p.offload_kqv = bool(offload_kqv)  # off: the KV cache stays in host memory (MTP context next to RPC devices)
        if pooled:  # embeddings and reranking (engine.runtime.pooled): the file's own pooling
            p.embeddings = True
        if mtp_target is not None:
            p.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
            p.ctx_other = mtp_target.ptr
        ptr = L.llama_init_from_model(model.ptr, p)
        if not ptr:
            kind = "MTP" if mtp_target is not None else "target"
            raise ContextError(f"llama.cpp could not create the {kind} context (n_ctx={n_ctx}); try a smaller context")
        self._ptr = ptr
        self.model = model
        self.n_ctx = int(L.llama_n_ctx(ptr))
        self.n_seq = n_seq
        #: the positions one sequence may hold (n_ctx with one sequence)
        self.n_ctx_seq = int(L.llama_n_ctx_seq(ptr)) if n_seq > 1 else self.n_ctx
        # what llama.cpp really uses: it clamps the batch to the context
        self.n_batch = int(L.llama_n_batch(ptr))
        self.n_ubatch = int(L.llama_n_ubatch(ptr))
        self.n_rs_seq = int(L.llama_n_rs_seq(ptr))
        self.n_outputs = min(n_outputs, self.n_batch) if n_outputs > 0 else self.n_batch
        self.step_rows = 0
        self.is_mtp = mtp_target is not None
        #: an MTP context that reads the target's KV cache instead of keeping its own
        #: (Gemma 4 assistants: llama.cpp honours ``ctx_other`` only there, and its draft-mtp
        #: tells this mode apart the same way). Its memory calls are the target's
        #: bookkeeping: clearing it would clear the target's cells.
        self.shares_memory = self.is_mtp and bool(ext().llama_get_ctx_other(ptr))
        self._mem = L.llama_get_memory(ptr)
        self._n_out = 0  # logit rows of the last decode
        self._views: dict[str, tuple[int, np.ndarray]] = {}  # buffer -> (its address, a view)
        self._nextn = False
        self.set_nextn_embeddings(nextn_embeddings)

    # ------------------------------------------------------------------ decode
    def set_nextn_embeddings(self, on: bool) -> None:
        """Make the batch yield hidden states: every row's on a target context (indexed
        by batch row), the output rows' on an MTP context (indexed by output row:
        llama.cpp's ``masked``, as llama-server sets it; some families' MTP graphs, like
        qwen3next's, keep only the output rows, and reading every batch row of them
        reads out of bounds)."""
        if on != self._nextn:
            ext().llama_set_embeddings_nextn(self.ptr, bool(on), self.is_mtp)
            self._nextn = on

    def set_nextn_layer_offset(self, head: int) -> None:
        """Which of a model's NextN blocks (chained heads) the MTP graph runs; 0: the first."""
        ext().llama_set_nextn_layer_offset(self.ptr, int(head))

    @property
    def nextn_embeddings(self) -> bool:
        return self._nextn

    def decode(self, batch: Batch) -> None:
        if batch.n == 0:
            return
        if batch.n_logits > self.n_outputs:  # llama.cpp would abort the process (GGML_ASSERT)
            raise DecodeError(
                f"a decode asked for {batch.n_logits} logit rows; this context was made for at most {self.n_outputs}"
            )
        L = llama()
        non_causal = getattr(batch, "non_causal", False)  # a media chunk's rows (Gemma's vision)
        if non_causal:
            L.llama_set_causal_attn(self.ptr, False)
        try:
            rc = int(L.llama_decode(self.ptr, batch.raw))
        finally:
            if non_causal:
                L.llama_set_causal_attn(self.ptr, True)
        if rc != 0:
            what = {1: "no room left in the context (KV cache full)", 2: "decode aborted", -1: "invalid batch"}.get(
                rc, f"error {rc}"
            )
            raise DecodeError(f"llama_decode failed: {what}")
        self._n_out = batch.n_logits
        #: rows the last decode carried (with slots, a sequence's view reports the whole step's)
        self.step_rows = batch.n

    def logit_rows_view(self) -> np.ndarray:
        """The last decode's logit rows (output rows in batch order), as a view."""
        ptr = llama().llama_get_logits(self.ptr)
        if not ptr:
            raise DecodeError("no logits: the last decode asked for none")
        return self._view("logits", ptr, (self.n_outputs, self.model.n_vocab))

    def hidden_view(self) -> np.ndarray:
        """Every hidden row of the last decode (a target's by batch row, an MTP context's
        by output row), as a view."""
        return self.hidden_rows(self.n_batch)

    def _view(self, name: str, ptr, shape: tuple[int, int]) -> np.ndarray:
        """A numpy view of llama.cpp's buffer ``name`` at ``ptr``, made again only when the
        buffer has moved."""
        addr = ctypes.addressof(ptr.contents)
        seen = self._views.get(name)
        if seen is None or seen[0] != addr:
            seen = self._views[name] = (addr, np.ctypeslib.as_array(ptr, shape=shape))
        return seen[1]

    def logits(self, i: int) -> np.ndarray:
        """Logits of output row ``i`` (``-1``: the last)."""
        n = self._n_out
        if not -n <= i < n:
            raise DecodeError(f"no logits for row {i}")
        return self.logit_rows_view()[i if i >= 0 else n + i]

    def argmax(self, i: int) -> int:
        return int(self.logits(i).argmax())

    def argmax_rows(self, n: int) -> list[int]:
        """Greedy token of each of the first ``n`` output rows, in one call."""
        if n > self._n_out:
            raise DecodeError(f"no logits for row {n - 1}")
        return self.logit_rows_view()[:n].argmax(axis=1).tolist()

    def hidden_rows(self, n: int) -> np.ndarray:
        """Hidden state (after ``output_norm``) of each of the last batch's ``n`` rows
        (on an MTP context: of its first ``n`` output rows)."""
        ptr = ext().llama_get_embeddings_nextn(self.ptr)
        if not ptr:
            raise DecodeError("no hidden states: nextn embeddings are not enabled on this context")
        return self._view("hidden", ptr, (self.n_batch, self.model.n_embd_out))[:n]

    def hidden_row(self, i: int) -> np.ndarray:
        return self.hidden_rows(i + 1)[i]

    # ------------------------------------------------------------------ memory
    def seq_rm(self, p0: int, p1: int = -1, *, seq: int = 0) -> bool:
        """Remove positions ``[p0, p1)`` of sequence ``seq``. False when llama.cpp cannot
        (recurrent state rolls back only within ``n_rs_seq`` tokens of the last decode, once)."""
        return bool(llama().llama_memory_seq_rm(self._mem, seq, p0, p1))

    def clear(self) -> None:
        if self.shares_memory:
            return  # it holds nothing of its own (and its cells are the target's)
        llama().llama_memory_clear(self._mem, True)

    def clear_seq(self, seq: int) -> None:
        """Empty one sequence (every sequence, with only one)."""
        if self.shares_memory:
            return
        if self.n_seq == 1:
            self.clear()
        else:
            llama().llama_memory_seq_rm(self._mem, seq, -1, -1)

    # ------------------------------------------------------------------- state
    def state_size(self, seq: int = 0) -> int:
        """Bytes :meth:`state_get` would return now (a sequence's KV cells, recurrent state)."""
        return int(llama().llama_state_seq_get_size_ext(self.ptr, seq, STATE_WHOLE))

    def state_get(self, seq: int = 0) -> bytearray:
        """A copy of sequence ``seq``'s whole memory state: the KV cells with their
        positions, and on a hybrid or recurrent model its recurrent state. Raises
        MemoryError when host memory cannot hold it."""
        return self._state_copy(seq, STATE_WHOLE)

    def partial_get(self, seq: int = 0) -> bytearray:
        """A copy of sequence ``seq``'s recurrent (or sliding-window) state alone — llama.cpp's
        ``PARTIAL_ONLY`` state, what llama-server checkpoints before a draft wider than the
        recurrent rollback reaches. Empty on a model without such state."""
        return self._state_copy(seq, STATE_PARTIAL_ONLY)

    def state_set(self, data: bytearray, seq: int = 0) -> None:
        """Replace sequence ``seq``'s memory with ``data`` from :meth:`state_get` of a
        context of the same model and settings (any sequence of it). On failure the
        sequence is left empty."""
        self.clear_seq(seq)
        read = self._state_read(data, seq, STATE_WHOLE)
        if read != len(data):
            self.clear_seq(seq)
            raise ContextError(f"llama.cpp could not restore a state snapshot ({read} of {len(data)} bytes read)")

    def partial_set(self, data: bytearray, seq: int = 0) -> bool:
        """Put back a :meth:`partial_get` copy; the KV cells are untouched (cut them back
        with :meth:`seq_rm` after). False when llama.cpp refuses the bytes."""
        return bool(data) and self._state_read(data, seq, STATE_PARTIAL_ONLY) == len(data)

    def _state_copy(self, seq: int, flags: int) -> bytearray:
        L = llama()
        n = int(L.llama_state_seq_get_size_ext(self.ptr, seq, flags))
        buf = bytearray(n)
        if n:
            view = (ctypes.c_uint8 * n).from_buffer(buf)
            written = int(L.llama_state_seq_get_data_ext(self.ptr, view, n, seq, flags))
            del view  # release the export so the buffer stays resizable
            if written != n:
                raise ContextError(f"llama.cpp wrote {written} of {n} state bytes")
        return buf

    def _state_read(self, data: bytearray, seq: int, flags: int) -> int:
        """Bytes llama.cpp read of ``data`` into sequence ``seq``."""
        n = len(data)
        if not n:
            return 0
        view = (ctypes.c_uint8 * n).from_buffer(data)
        read = int(llama().llama_state_seq_set_data_ext(self.ptr, view, n, seq, flags))
        del view
        return read
