"""How much memory llama.cpp will allocate for a model, from its GGUF header alone.

The same arithmetic serves a file on disk and a remote file (whose header the hub code
reads with ranged requests), so a download can be judged before it starts. Sizes follow
the vendored llama.cpp (``../shared/design/FIT.md``) as the app creates its contexts
(:mod:`engine.runtime.load.loader`):

- **weights**: the tensors' bytes; NextN (MTP) layers only when MTP is on (llama.cpp skips
  them otherwise). Per layer, so an offload split can be priced.
- **KV cache**: attention layers of the trunk x cells (the context padded to 256) x
  ``n_head_kv x (d_k + d_v)`` at 2 bytes (F16, llama.cpp's default). Sliding-window layers
  count in full: the app keeps llama.cpp's ``swa_full`` (a shorter window cache could not
  be rolled back or reused).
- **recurrent state**: per recurrent layer, F32 ``(d_conv-1)(d_inner + 2 n_group d_state)``
  + ``d_state x d_inner`` per row, ``1 + n_rs_seq`` rows (the draft depth's rollback
  snapshots when MTP is on).
- **MTP**: the NextN layers' weights (or a separate head's), and a second context: a KV
  cache over the NextN layers at the same context and its own compute buffer.
- **compute**: per context, activations (measured: about 4 x ``n_ff`` floats per batch
  row), the attention mask (``n_ctx x n_ubatch`` F16, one per attention kind), and the
  logits reserve ``n_vocab x n_outputs`` floats, and :data:`RUNTIME_BYTES`. The app asks llama.cpp for the logit rows
  it reads (:func:`logit_rows`), not ``n_batch``:
  :attr:`MemoryEstimate.saved_bytes` is what that saves.

Calibrated against llama.cpp's own buffer log and the process's peak memory
(``mtp-studio bench memory``; the table in docs/models.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: llama.cpp pads every context to this many cells
CTX_PAD = 256
#: bytes per KV element at llama.cpp's default cache type (F16)
KV_ELEMENT_BYTES = 2
#: activation floats per batch row, per ``n_ff`` (measured on qwen35 and gemma3 shapes)
ACTIVATION_FLOATS_PER_FF = 4
#: what a load holds besides llama.cpp's buffers: its graphs' metadata, the tokenizer's
#: tables, the engine's own rows and caches (measured 40-53 MB on models of 4k-262k tokens)
RUNTIME_BYTES = 40 << 20
#: architectures whose recurrent layers are told apart from attention ones by
#: ``attention.recurrent_layers`` / ``full_attention_interval`` (llama.cpp's qwen35.cpp)
INTERVAL_HYBRIDS = {"qwen35", "qwen35moe", "qwen3next"}
#: all-recurrent architectures with Mamba-style state (llama.cpp's llm_arch_is_recurrent)
RECURRENT = {"mamba", "mamba2"}

#: logit rows a target decode may read besides a verify batch's depth + 1: a grammar's
#: forced run verified in one batch (longer runs take more rounds), and ``bench
#: identity``'s widest replay (its ``--max-width``)
MIN_LOGIT_ROWS = 16
#: ... and up to this many where they fit in :data:`LOGIT_ROWS_BYTES` per sequence: a
#: suffix draft (engine.runtime.decode.drafting.suffix) runs as far as its match, and an agent's
#: copied file is verified in fewer, wider batches (64 rows of a 128k vocabulary, 32 of
#: Gemma's 262k, 16 of anything over 512k)
MAX_LOGIT_ROWS = 64
LOGIT_ROWS_BYTES = 32 << 20


def logit_rows(depth: int, n_vocab: int = 0) -> int:
    """Logit rows the target context is made for per sequence (``n_outputs_max``): a
    verify batch reads ``depth + 1``; the MTP context reads one row per decode. With
    ``n_vocab``, as many more as :data:`LOGIT_ROWS_BYTES` holds, up to :data:`MAX_LOGIT_ROWS`."""
    wide = min(MAX_LOGIT_ROWS, LOGIT_ROWS_BYTES // (4 * n_vocab)) if n_vocab > 0 else 0
    return max(depth + 1, MIN_LOGIT_ROWS, wide)


_BLK = re.compile(r"^blk\.(\d+)\.")


def pad(n: int, to: int = CTX_PAD) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of one GGUF model (all its shards)."""

    architecture: str
    n_vocab: int
    n_embd: int
    n_ff: int
    n_ctx_train: int
    n_layer_all: int  # block_count: trunk + NextN
    n_nextn: int
    #: per trunk layer: KV elements per cell (n_head_kv x (d_k + d_v)); 0: no KV
    kv_per_cell: tuple[int, ...]
    recurrent_layers: int
    #: floats per row of one recurrent layer's state (R + S)
    recurrent_floats: int
    #: attention masks a batch builds (2 with sliding-window layers)
    n_masks: int
    layer_bytes: tuple[int, ...]  # per block, index = layer (NextN layers last)
    embd_bytes: int  # token_embd: always in host memory
    output_bytes: int  # output and output_norm
    other_bytes: int
    #: why the figure is rougher than usual (an architecture the formulas do not know)
    caveat: str | None = None

    @property
    def n_layer(self) -> int:
        """Trunk layers."""
        return self.n_layer_all - self.n_nextn

    @property
    def weights_bytes(self) -> int:
        return sum(self.layer_bytes) + self.embd_bytes + self.output_bytes + self.other_bytes

    @classmethod
    def from_header(cls, get: Callable[[str], Any], tensors: Iterable[tuple[str, int]]) -> ModelShape:
        """``get(key)``: a metadata value or None; ``tensors``: (name, bytes) of every
        tensor of every shard."""
        arch = str(get("general.architecture") or "?")

        def num(key: str, default: int = 0) -> int:
            v = get(f"{arch}.{key}")
            if isinstance(v, list):
                v = max(v) if v else default
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

        def per_layer(key: str, n: int, default: int) -> list[int]:
            v = get(f"{arch}.{key}")
            if isinstance(v, list) and len(v) >= n:
                return [int(x) for x in v[:n]]
            return [num(key, default)] * n

        n_all = num("block_count")
        n_nextn = min(num("nextn_predict_layers"), n_all)
        n_trunk = n_all - n_nextn
        n_embd = num("embedding_length")
        n_head = per_layer("attention.head_count", n_all, 0)
        n_head_kv = per_layer("attention.head_count_kv", n_all, 0)
        n_head_kv = [kv if kv or arch in RECURRENT else h for kv, h in zip(n_head_kv, n_head, strict=True)]
        head0 = max(n_head) if n_head else 0
        d_k = num("attention.key_length", n_embd // head0 if head0 else 0)
        d_v = num("attention.value_length", d_k)
        caveat = None
        recurrent = [False] * n_trunk
        if arch in INTERVAL_HYBRIDS:
            flags = get(f"{arch}.attention.recurrent_layers")
            if isinstance(flags, list) and len(flags) >= n_trunk:
                recurrent = [bool(x) for x in flags[:n_trunk]]
            else:
                every = num("full_attention_interval", 4) or 4
                recurrent = [(i + 1) % every != 0 for i in range(n_trunk)]
        elif arch in RECURRENT:
            recurrent = [True] * n_trunk
        elif any(kv == 0 for kv in n_head_kv[:n_trunk]):  # jamba-like hybrids: no KV heads = recurrent
            recurrent = [kv == 0 for kv in n_head_kv[:n_trunk]]
            caveat = f"{arch}'s recurrent layers are priced as Mamba-style state"
        kv_per_cell = tuple(0 if recurrent[i] else n_head_kv[i] * (d_k + d_v) for i in range(n_trunk))
        d_conv, d_inner = num("ssm.conv_kernel"), num("ssm.inner_size")
        d_state, n_group = num("ssm.state_size"), num("ssm.group_count")
        r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
        s = d_state * d_inner
        n_ff = num("feed_forward_length")
        n_expert_used, n_ff_exp = num("expert_used_count"), num("expert_feed_forward_length")
        n_ff = max(n_ff, n_expert_used * n_ff_exp, n_embd)
        layer_bytes = [0] * n_all
        embd = output = other = 0
        for name, nbytes in tensors:
            m = _BLK.match(name)
            if m and int(m[1]) < n_all:
                layer_bytes[int(m[1])] += nbytes
            elif name.startswith("token_embd."):
                embd += nbytes
            elif name.startswith("output"):
                output += nbytes
            else:
                other += nbytes
        tokens = get("tokenizer.ggml.tokens")
        n_vocab = len(tokens) if isinstance(tokens, list) else int(tokens or 0)
        swa = num("attention.sliding_window") > 0
        return cls(
            architecture=arch,
            n_vocab=n_vocab,
            n_embd=n_embd,
            n_ff=n_ff,
            n_ctx_train=num("context_length"),
            n_layer_all=n_all,
            n_nextn=n_nextn,
            kv_per_cell=kv_per_cell,
            recurrent_layers=sum(recurrent),
            recurrent_floats=r + s,
            n_masks=2 if swa else 1,
            layer_bytes=tuple(layer_bytes),
            embd_bytes=embd,
            output_bytes=output,
            other_bytes=other,
            caveat=caveat,
        )

    @classmethod
    def from_kvs(cls, kvs: Mapping[str, Any], tensors: Iterable[tuple[str, int]]) -> ModelShape:
        """From parsed header entries (:class:`engine.gguf.reader.KV` by key), local or remote."""

        def get(key: str):
            kv = kvs.get(key)
            if kv is None:
                return None
            return kv.count if key == "tokenizer.ggml.tokens" else kv.value  # no need to decode 250k strings

        return cls.from_header(get, tensors)

    @classmethod
    def of_set(cls, ms) -> ModelShape:
        """The shape of a local model (:class:`engine.gguf.shards.ModelSet`)."""
        return cls.from_kvs(ms.first.kvs, ((t.name, t.nbytes) for _, t in ms.all_tensors()))


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one load needs, by part (``total_bytes`` is their sum), and where they go."""

    n_ctx: int
    weights_bytes: int  # the trunk's weights (MTP's are in mtp_bytes)
    kv_bytes: int  # the target context's KV cache
    recurrent_bytes: int  # the target context's recurrent state
    mtp_bytes: int  # NextN/head weights + the MTP context's KV cache and compute buffer
    compute_bytes: int  # the target context's compute and output buffers
    #: of the total, what lands on the GPU (offloaded layers, their caches, compute)
    offloaded_bytes: int = 0
    #: logits reserve the app does not make (llama.cpp's default n_outputs = n_batch)
    saved_bytes: int = 0
    gpu_layers: int = 0
    n_layers: int = 0
    caveat: str | None = None
    #: a projector's weights and its encoder's working memory (images and audio)
    projector_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_bytes
            + self.kv_bytes
            + self.recurrent_bytes
            + self.mtp_bytes
            + self.compute_bytes
            + self.projector_bytes
        )

    @property
    def host_bytes(self) -> int:
        return self.total_bytes - self.offloaded_bytes

    def to_json(self) -> dict:
        d = asdict(self)
        d["total_bytes"] = self.total_bytes
        d["host_bytes"] = self.host_bytes
        return d


def _compute(shape: ModelShape, n_ctx: int, n_ubatch: int, n_outputs: int) -> int:
    activations = 4 * n_ubatch * ACTIVATION_FLOATS_PER_FF * shape.n_ff
    mask = shape.n_masks * 2 * n_ctx * n_ubatch
    logits = 4 * shape.n_vocab * n_outputs
    nextn_rows = 4 * shape.n_embd * n_ubatch  # hidden rows read back for MTP (host)
    return activations + mask + logits + nextn_rows


def estimate(
    shape: ModelShape,
    n_ctx: int,
    *,
    mtp: bool,
    head: ModelShape | None = None,
    depth: int = 4,
    n_batch: int = 512,
    n_outputs: int | None = None,
    gpu_layers: int = 0,
    n_seq: int = 1,
    projector: int = 0,
) -> MemoryEstimate:
    """Memory for ``shape`` loaded as the app loads it: a target context of ``n_ctx``
    (capped at the training context as the loader caps it), an MTP context when ``mtp``
    (from ``head`` when given, else the NextN layers), ``gpu_layers`` of the model's
    layers offloaded (counted from the output end, as llama.cpp does; 0: CPU only), for
    ``n_seq`` sequences decoding together (slots: each has logit rows of its own; the KV
    cache is the caller's ``n_ctx``), with a projector file of ``projector`` bytes (its
    weights, and as much again for its encoder's working memory: a conservative bound;
    on the GPU when any layer is, as libmtmd puts it)."""
    if shape.n_ctx_train > 0:
        n_ctx = min(n_ctx, shape.n_ctx_train)
    cells = pad(max(n_ctx, 1))
    depth = max(1, depth)
    n_ubatch = min(max(n_batch, depth + 2), cells)
    if n_outputs is None:  # every sequence (slot) has logit rows of its own
        n_outputs = logit_rows(depth, shape.n_vocab) * n_seq
    trunk = shape.n_layer
    layers_all = shape.n_layer_all if mtp and head is None else trunk
    # llama.cpp offloads layers il >= n_layer_all + 1 - n_gpu_layers, the output layer
    # being index n_layer_all; token_embd stays in host memory
    ngl = max(0, min(gpu_layers, layers_all + 1))
    first_gpu = layers_all + 1 - ngl
    on_gpu = [il >= first_gpu for il in range(layers_all + 1)]
    trunk_w = sum(shape.layer_bytes[:trunk])
    weights = trunk_w + shape.embd_bytes + shape.output_bytes + shape.other_bytes
    kv_layers = [cells * per * KV_ELEMENT_BYTES for per in shape.kv_per_cell]
    kv = sum(kv_layers)
    rows = 1 + (depth if mtp else 0)
    rs_layer = 4 * shape.recurrent_floats * rows
    rs = rs_layer * shape.recurrent_layers
    compute = _compute(shape, cells, n_ubatch, n_outputs) + RUNTIME_BYTES
    saved = 4 * shape.n_vocab * (n_ubatch - min(n_outputs, n_ubatch))
    mtp_bytes = 0
    offloaded = sum(shape.layer_bytes[il] for il in range(trunk) if on_gpu[il])
    offloaded += sum(kv_layers[il] for il in range(trunk) if on_gpu[il])
    offloaded += rs_layer * sum(1 for il in range(trunk) if on_gpu[il] and shape.kv_per_cell[il] == 0)
    if on_gpu[layers_all]:
        offloaded += shape.output_bytes
    if mtp:
        src = head if head is not None else shape
        nextn = range(src.n_layer, src.n_layer_all)
        w = sum(src.layer_bytes[il] for il in nextn)
        if head is not None:  # a separate head file brings its own embeddings and output
            w += src.embd_bytes + src.output_bytes + src.other_bytes
        per_cell = max(shape.kv_per_cell or (0,)) or max(src.kv_per_cell or (0,))
        mkv = cells * per_cell * KV_ELEMENT_BYTES * max(len(nextn), 1)
        mcompute = _compute(src, cells, n_ubatch, 1)
        saved += 4 * src.n_vocab * (n_ubatch - 1)
        mtp_bytes = w + mkv + mcompute
        if head is None and any(on_gpu[il] for il in nextn):
            offloaded += w + mkv
    projector_bytes = 2 * projector
    if ngl > 0:
        offloaded += compute + projector_bytes
        if mtp:
            offloaded += _compute(head or shape, cells, n_ubatch, 1)
    return MemoryEstimate(
        n_ctx=cells,
        weights_bytes=weights,
        kv_bytes=kv,
        recurrent_bytes=rs,
        mtp_bytes=mtp_bytes,
        compute_bytes=compute,
        offloaded_bytes=offloaded,
        saved_bytes=saved,
        gpu_layers=ngl,
        n_layers=layers_all + 1,
        caveat=shape.caveat,
        projector_bytes=projector_bytes,
    )
