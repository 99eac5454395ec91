"""The child side of :mod:`engine.runtime.load.rpcsurvey`: register the RPC servers, list
the devices (and, for a model, plan its placement) and print them as one JSON line, or
``{"error": ...}`` with exit status 1.

``python -m engine.runtime.load.rpcsurvey_child --rpc HOST:PORT[,...] [--model PATH] [--tensor-split W,...]``
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.errors import InvalidSettingError, MtpStudioError
from engine.gguf.validate import validate_path
from engine.rpc.endpoints import Endpoint, parse_endpoints
from engine.runtime.load.placement import plan_placement
from engine.runtime.load.rpcdevices import devices


def survey(endpoints: tuple[Endpoint, ...], model: str | None = None, weights: list[float] | None = None) -> dict:
    """Devices (and, for ``model``, the placement) as JSON. Registration can abort the
    process, so callers run this in a child
    (:func:`engine.runtime.load.rpcsurvey.survey_in_child`)."""
    remote, local = devices(endpoints)
    out: dict = {"endpoints": [str(e) for e in endpoints], "devices": [d.to_json() for d in remote + local]}
    if model is not None:
        report, facts, _ = validate_path(model)
        if not report.valid:
            raise InvalidSettingError(f"{model} is not a valid GGUF: {report.errors[0].message}")
        p = plan_placement(
            remote,
            local,
            n_layer_trunk=(facts.block_count or 0) - facts.nextn_layers,
            n_nextn=facts.nextn_layers,
            weights=weights,
        )
        out["placement"] = p.to_json()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.runtime.load.rpcsurvey_child")
    ap.add_argument("--rpc", required=True)
    ap.add_argument("--model")
    ap.add_argument("--tensor-split")
    a = ap.parse_args(argv)
    try:
        weights = [float(x) for x in a.tensor_split.split(",")] if a.tensor_split else None
        print(json.dumps(survey(parse_endpoints(a.rpc), a.model, weights)), flush=True)
    except (MtpStudioError, ValueError) as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
