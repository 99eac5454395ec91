"""Will it fit: a model's memory estimate (:mod:`engine.gguf.memory`) against this
machine's free memory, before anything is downloaded or allocated.

:func:`assess` places the model as llama.cpp would — every layer on the GPU when it
fits, else as many layers as fit (``partial``), else host memory only (``cpu``) — keeps
:data:`MARGIN_BYTES` free on each device (llama.cpp's own ``--fit`` margin), and finds
the largest context that fits that placement. The loader refuses a load that does not
fit (:class:`engine.errors.InsufficientMemoryError`) unless the user overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.backends.hostmem import host_memory
from engine.gguf.inspect import human_size
from engine.gguf.memory import CTX_PAD, MemoryEstimate, ModelShape, estimate
from engine.runtime import limits

#: memory kept free on every device, as llama.cpp's --fit does (common.h: fit margin)
MARGIN_BYTES = 1 << 30


@dataclass(frozen=True)
class DeviceFree:
    name: str
    kind: str  # "cpu" (host memory) | "gpu"
    total: int
    free: int
    note: str | None = None  # what limited ``free`` (a container's limit, an override)

    @property
    def room(self) -> int:
        return max(self.free - MARGIN_BYTES, 0)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "total_bytes": self.total,
            "free_bytes": self.free,
            "note": self.note,
        }


def machine_devices(*, with_gpus: bool = True) -> list[DeviceFree]:
    """Host memory first, then the GPUs of the loaded llama.cpp build."""
    host = host_memory()
    out = [DeviceFree("host memory", "cpu", host.total, host.available, host.limit)]
    if with_gpus:
        from engine.runtime.llama.devices import list_devices

        for d in list_devices():
            if d.gpu:
                out.append(DeviceFree(d.name, "gpu", d.memory_total, d.memory_free))
    return out


@dataclass
class Fit:
    """Where a model goes on this machine and whether it fits."""

    verdict: str  # "gpu" (fully) | "partial" | "cpu" | "none"
    n_ctx: int  # the context assessed (after the training-context cap and padding)
    max_ctx: int  # the largest context that fits this placement (0: none does)
    estimate: MemoryEstimate
    devices: list[DeviceFree]
    needs: dict[str, int] = field(default_factory=dict)  # device name -> bytes

    @property
    def fits(self) -> bool:
        return self.verdict != "none"

    def label(self) -> str:
        """A few words for a badge: "fits on the GPU", "partly on the GPU (20 of 33 layers)"…"""
        e = self.estimate
        return {
            "gpu": "fits on the GPU",
            "partial": f"partly on the GPU ({e.gpu_layers} of {e.n_layers} layers)",
            "cpu": "fits in memory (CPU)" if len(self.devices) == 1 else "CPU only",
            "none": "does not fit",
        }[self.verdict]

    def line(self) -> str:
        """One line: what it needs, where, and the largest context that fits."""
        e = self.estimate
        head = f"{human_size(e.total_bytes)} at context {e.n_ctx}: {self.label()}"
        if self.verdict == "none":
            return head + "; " + self.refusal_tail()
        return head + f"; up to context {self.max_ctx} fits"

    def refusal(self) -> str:
        """The sentence a refused load gives."""
        return (
            f"This model needs {human_size(self.estimate.total_bytes)} at context {self.estimate.n_ctx}; "
            + self.refusal_tail()
        )

    def refusal_tail(self) -> str:
        host = self.devices[0]
        have = f"this machine has {human_size(host.free)} free"
        gpus = [d for d in self.devices if d.kind == "gpu"]
        if gpus:
            have += " (" + ", ".join(f"{d.name}: {human_size(d.free)}" for d in gpus) + ")"
        if host.note:
            have += f", limited by {host.note}"
        have += f", and {human_size(MARGIN_BYTES)} is kept free"
        if self.max_ctx >= limits.MIN_CTX:
            return f"{have}. Context {self.max_ctx} fits, or use a smaller quantization."
        return f"{have}. Even a minimal context does not fit: use a smaller quantization of the model."

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict,
            "label": self.label(),
            "n_ctx": self.n_ctx,
            "max_ctx": self.max_ctx,
            "gpu_layers": self.estimate.gpu_layers,
            "n_layers": self.estimate.n_layers,
            "margin_bytes": MARGIN_BYTES,
            "devices": [
                dict(d.to_json(), need_bytes=self.needs.get(d.name, 0), fits=self.needs.get(d.name, 0) <= d.room)
                for d in self.devices
            ],
        }


def _needs(e: MemoryEstimate, devices: list[DeviceFree]) -> dict[str, int]:
    out = {devices[0].name: e.host_bytes}
    gpus = [d for d in devices if d.kind == "gpu"]
    if gpus and e.offloaded_bytes:
        out[gpus[0].name] = e.offloaded_bytes
    return out


def _fits(e: MemoryEstimate, devices: list[DeviceFree]) -> bool:
    needs = _needs(e, devices)
    return all(needs.get(d.name, 0) <= d.room for d in devices)


def assess(
    shape: ModelShape,
    n_ctx: int,
    devices: list[DeviceFree],
    *,
    mtp: bool,
    head: ModelShape | None = None,
    depth: int = 4,
    n_batch: int = 512,
    n_gpu_layers: int = -1,
    n_seq: int = 1,
    projector: int = 0,
) -> Fit:
    """Place ``shape`` at context ``n_ctx`` on ``devices`` (host memory first).
    ``n_gpu_layers``: -1 lets the fit choose (all, else as many as fit), 0 keeps
    everything in host memory, N offloads N layers. ``n_seq``: sequences decoding
    together (slots), each with logit rows of its own. ``projector``: the bytes of a
    projector file loaded beside the model."""

    def at(ctx: int, ngl: int) -> MemoryEstimate:
        return estimate(
            shape,
            ctx,
            mtp=mtp,
            head=head,
            depth=depth,
            n_batch=n_batch,
            gpu_layers=ngl,
            n_seq=n_seq,
            projector=projector,
        )

    has_gpu = any(d.kind == "gpu" for d in devices)
    n_all = at(n_ctx, 0).n_layers
    if not has_gpu or n_gpu_layers == 0:
        choices = [0]
    elif n_gpu_layers > 0:
        choices = [n_gpu_layers]
    else:
        choices = list(range(n_all, -1, -1))  # all layers first, then fewer
    verdict = "none"
    for ngl in choices:
        e = at(n_ctx, ngl)
        if _fits(e, devices):
            verdict = "gpu" if ngl >= e.n_layers else ("partial" if ngl > 0 else "cpu")
            break
    # e: the placement that fits, or (none fits) the last one tried
    ngl = e.gpu_layers
    cap = shape.n_ctx_train if shape.n_ctx_train > 0 else 1 << 22
    max_ctx = _largest_ctx(lambda c: _fits(at(c, ngl), devices), cap)
    return Fit(verdict, e.n_ctx, max_ctx, e, devices, _needs(e, devices))


def _largest_ctx(fits, cap: int) -> int:
    """The largest context (a multiple of 256, or the cap itself) for which ``fits``; 0
    when not even :data:`limits.MIN_CTX` does. Memory grows with the context, so a
    binary search over multiples of 256 finds it."""
    if fits(cap):
        return cap
    if not fits(limits.MIN_CTX):
        return 0
    lo, hi = 0, cap // CTX_PAD  # fits(lo * 256) (lo = 0 stands for MIN_CTX), not fits(hi * 256)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * CTX_PAD):
            lo = mid
        else:
            hi = mid
    return max(lo * CTX_PAD, limits.MIN_CTX)


def fit_of_set(ms, n_ctx: int, *, mtp: bool, devices: list[DeviceFree] | None = None) -> Fit:
    """:func:`assess` for a local model (:class:`engine.gguf.shards.ModelSet`) on this machine."""
    shape = ModelShape.of_set(ms)
    return assess(shape, limits.effective_ctx(n_ctx, shape.n_ctx_train), devices or machine_devices(), mtp=mtp)
