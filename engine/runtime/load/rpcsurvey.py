"""Listing RPC devices (and a model's placement on them) without risking this process.

Registering RPC servers can abort the process, so the survey runs in a child
(:mod:`engine.runtime.load.rpcsurvey_child`) after a handshake with every endpoint; it
backs ``mtp-studio rpc devices`` and the app's RPC panel.
"""

from __future__ import annotations

from engine.childproc import run_child
from engine.errors import RpcError
from engine.rpc.endpoints import Endpoint, check_reachable, format_endpoints

CHILD_MODULE = "engine.runtime.load.rpcsurvey_child"


def survey_in_child(
    endpoints: tuple[Endpoint, ...], model: str | None = None, weights=None, timeout: float = 60
) -> dict:
    """:func:`engine.runtime.load.rpcsurvey_child.survey` in a child process, after a
    handshake with every endpoint."""
    check_reachable(endpoints)
    args = ["--rpc", format_endpoints(endpoints)]
    if model:
        args += ["--model", str(model)]
    if weights:
        args += ["--tensor-split", ",".join(str(w) for w in weights)]
    out = run_child(CHILD_MODULE, *args, timeout=timeout)
    if out.returncode != 0 or "devices" not in out.last:
        said = out.last.get("error") or " / ".join(out.stderr_tail) or out.signal_name
        raise RpcError(f"Could not list the RPC devices: {said}")
    return out.last
