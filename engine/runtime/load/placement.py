"""Placing a model's layers on RPC devices and this machine's, and the llama.cpp params for it.

Placement (:func:`plan_placement`) is computed here, not left to llama.cpp, so it can be
shown and overridden: the trunk's layers are split across the remote devices and the
local one by free memory (or the user's weights), and the NextN (MTP) block, the output
norm and the output matrix are pinned to the local device with tensor overrides — drafts
then never cross the network, and only hidden states (not logits) come back per verify.
The MTP context also keeps its KV cache local (``offload_kqv`` off). :class:`LlamaParams`
and :class:`LocalOnly` put a placement into ``llama_model_params``. The devices come
from :mod:`engine.runtime.load.rpcdevices`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from engine.errors import InvalidSettingError, RpcError
from engine.runtime.llama.devices import _ggml
from engine.runtime.load.rpcdevices import Device


@dataclass
class Placement:
    """Where a model's layers go. ``devices`` is the order shown, weighted and handed to
    llama.cpp; the last is this machine's and holds the MTP block and the output layer."""

    devices: list[Device]
    layers: list[int]  # trunk layers per device
    #: for llama_model_params: every layer is offloaded, split by these fractions
    n_gpu_layers: int
    tensor_split: list[float]
    #: tensors pinned to this machine (tensor_buft_overrides)
    local_patterns: list[str]

    @property
    def local(self) -> Device:
        return self.devices[-1]

    def to_json(self) -> dict:
        return {
            "devices": [dict(d.to_json(), layers=n) for d, n in zip(self.devices, self.layers, strict=True)],
            "mtp_and_output": self.local.name,
            "n_gpu_layers": self.n_gpu_layers,
            "tensor_split": [round(x, 6) for x in self.tensor_split],
        }


@dataclass(frozen=True)
class PlacedDevice:
    """A device as a placement report lists it (:meth:`Placement.to_json`, or an RPC survey's
    devices before any model is placed): read by :func:`placed_devices`, the reports' one reader."""

    name: str
    #: cpu | gpu | igpu | ...
    type: str
    #: the RPC server's host:port; None for this machine's own
    endpoint: str | None
    memory_free: int
    memory_total: int
    #: trunk layers placed on it (None: a survey, nothing placed)
    layers: int | None = None


def placed_devices(report: dict) -> tuple[list[PlacedDevice], str | None]:
    """The devices of a report — a placement's (``{"placement": Placement.to_json()}``, with
    their layers) else a survey's (``{"devices": [...]}``) — and the device that holds the MTP
    head and the output layer (None: nothing placed)."""
    placement = report.get("placement") or {}
    rows = placement.get("devices") or report.get("devices") or []
    devices = [
        PlacedDevice(
            d["name"], d.get("type", ""), d.get("endpoint"), d["memory_free"], d["memory_total"], d.get("layers")
        )
        for d in rows
    ]
    return devices, placement.get("mtp_and_output")


def share_layers(n: int, weights: list[float]) -> list[int]:
    """``n`` layers in proportion to ``weights`` (largest remainder; ties go to the
    earlier device)."""
    total = sum(weights)
    if total <= 0:
        raise InvalidSettingError("The tensor split must give at least one device a positive share.")
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def plan_placement(
    remote: list[Device], local: list[Device], *, n_layer_trunk: int, n_nextn: int, weights: list[float] | None = None
) -> Placement:
    """Split ``n_layer_trunk`` trunk layers over ``remote + local`` (by free memory, or by
    ``weights``, one per device in that order); pin the NextN block and output locally."""
    shown = remote + local
    if not remote:
        raise RpcError("None of the RPC servers offers a device.")
    if weights is None:
        weights = [float(max(d.memory_free, 1)) for d in shown]
    elif len(weights) != len(shown):
        names = ", ".join(d.name for d in shown)
        raise InvalidSettingError(
            f"The tensor split has {len(weights)} values but there are {len(shown)} devices ({names}); give one "
            "weight per device, remote ones first, in the order listed."
        )
    if any(w < 0 for w in weights):
        raise InvalidSettingError("Tensor split weights cannot be negative.")
    counts = share_layers(n_layer_trunk, list(weights))
    n_layer_all = n_layer_trunk + n_nextn
    # Every layer is "offloaded", to params.devices in order by cumulative tensor_split
    # fractions (llama_model_base::load_tensors); this machine's device — its CPU too — is
    # the last, so the NextN block and the output layer (indices n_layer_trunk and up) land
    # on it. That matters beyond the weights: llama.cpp computes each layer's norms on that
    # layer's device, so a NextN layer assigned to a remote device would cost round trips
    # on every draft.
    act = n_layer_all + 1
    slots = list(counts)
    slots[-1] += n_nextn + 1
    split, cum, prev = [], 0, 0.0
    for j, n in enumerate(slots):
        cum += n
        bound = 1.0 if j == len(slots) - 1 else (cum - 0.5) / act  # mid-gap bounds: no float ties
        split.append(max(0.0, bound - prev))
        prev = max(prev, bound)
    patterns = [rf"^blk\.{il}\." for il in range(n_layer_trunk, n_layer_all)] + [r"^output\.", r"^output_norm\."]
    return Placement(shown, counts, act, split, patterns)


class _Override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class LlamaParams:
    """The ctypes arrays a placement needs in ``llama_model_params``, kept alive for the
    load."""

    def __init__(self, p: Placement):
        n = len(p.devices)
        self.devices = (ctypes.c_void_p * (n + 1))(*[d.ptr for d in p.devices], None)
        self.tensor_split = (ctypes.c_float * n)(*p.tensor_split)
        # the CPU device's buffer type is ggml_backend_cpu_buffer_type(), which llama.cpp
        # recognises in overrides to allow CPU weight repacking
        buft = _ggml().ggml_backend_dev_buffer_type(p.local.ptr)
        self._patterns = [s.encode() for s in p.local_patterns]
        self.overrides = (_Override * (len(self._patterns) + 1))(
            *[_Override(s, buft) for s in self._patterns], _Override(None, None)
        )
        self.n_gpu_layers = p.n_gpu_layers

    def apply(self, params) -> None:
        params.devices = ctypes.cast(self.devices, ctypes.c_void_p)
        params.tensor_buft_overrides = ctypes.cast(self.overrides, ctypes.c_void_p)
        params.tensor_split = ctypes.cast(self.tensor_split, ctypes.POINTER(ctypes.c_float))
        params.n_gpu_layers = self.n_gpu_layers


class LocalOnly:
    """Model params that keep a model (a separate MTP head) on this machine while RPC
    devices are registered: an explicit device list, so the head never lands on them
    whatever llama.cpp's default device choice is."""

    def __init__(self, local: Device):
        ptrs = [] if local.kind == "cpu" else [local.ptr]  # no devices: llama.cpp's plain CPU placement
        self.devices = (ctypes.c_void_p * (len(ptrs) + 1))(*ptrs, None)

    def apply(self, params) -> None:
        params.devices = ctypes.cast(self.devices, ctypes.c_void_p)
