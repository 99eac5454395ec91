"""This machine as the Backend and Models pages see it: llama.cpp builds and the backend
picker, the devices and repacking verdict of the loaded build, what fits its memory, and
RPC (sharing this machine, pooling others)."""

from __future__ import annotations

from engine.backends import builds
from engine.backends.builds import load_manifest
from engine.backends.detect import detect
from engine.backends.plan import make_plan
from engine.rpc.endpoints import parse_endpoints, parse_tensor_split
from engine.rpc.server import RpcServer, ServerOptions
from engine.runtime.llama.devices import list_devices, loaded_lib_dir
from engine.runtime.llama.repack import verdict
from engine.runtime.load.buildcheck import run_smoke
from engine.runtime.load.fit import DeviceFree, Fit, machine_devices
from engine.runtime.load.placement import placed_devices
from engine.runtime.load.recommend import recommend, remote_fit
from engine.runtime.load.rpcdevices import rpc_available
from engine.runtime.load.rpcsurvey import survey_in_child

__all__ = [
    "DeviceFree",
    "Fit",
    "RpcServer",
    "ServerOptions",
    "builds",
    "detect",
    "list_devices",
    "load_manifest",
    "loaded_lib_dir",
    "machine_devices",
    "make_plan",
    "parse_endpoints",
    "parse_tensor_split",
    "placed_devices",
    "recommend",
    "remote_fit",
    "rpc_available",
    "run_smoke",
    "survey_in_child",
    "verdict",
]
