"""Endpoint lists, the layer split (checked against where llama.cpp really puts each layer)
and the build plan."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.backends.builds import build_name
from engine.backends.detect import Detection
from engine.backends.plan import RPC_ARGS, make_plan
from engine.childproc import child_env
from engine.errors import InvalidSettingError, RpcUnreachableError
from engine.rpc.endpoints import Endpoint, check_reachable, parse_endpoints, parse_tensor_split
from engine.gguf.reader import read_header
from engine.rpc.server import ServerOptions
from engine.runtime.load.placement import plan_placement, share_layers
from engine.runtime.load.rpcdevices import Device
from engine.synth.qwen35 import build_model
from tests.engine.rpc.conftest import free_port
from tests.models import RECIPES

ROOT = Path(__file__).resolve().parents[3]


def test_endpoints_parse_and_bad_ones_say_what_is_wrong():
    assert parse_endpoints("127.0.0.1:50052, 10.0.0.2:6000") == (
        Endpoint("127.0.0.1", 50052),
        Endpoint("10.0.0.2", 6000),
    )
    assert parse_endpoints("[::1]:50052")[0] == Endpoint("::1", 50052) and str(Endpoint("::1", 5)) == "[::1]:5"
    assert parse_endpoints(["a:1", "b:2"]) == (Endpoint("a", 1), Endpoint("b", 2))
    assert parse_endpoints("") == () and parse_endpoints(None) == ()
    for bad, words in [
        ("127.0.0.1", "host:port"),
        ("host:port", "not a number"),
        ("h:70000", "between 1 and 65535"),
        ("a:1,a:1", "listed twice"),
        ("::1:80", "host:port"),
    ]:
        with pytest.raises(InvalidSettingError, match=words):
            parse_endpoints(bad)
    with pytest.raises(InvalidSettingError, match="At most 16"):
        parse_endpoints([f"h:{i}" for i in range(1, 18)])


def test_tensor_split_parses_and_rejects_nonsense():
    assert parse_tensor_split("3,1,1") == (3.0, 1.0, 1.0) and parse_tensor_split(None) is None
    for bad in ("a,b", "-1,2", "0,0"):
        with pytest.raises(InvalidSettingError):
            parse_tensor_split(bad)


def test_unreachable_endpoint_is_named_with_what_to_do():
    port = free_port()  # nothing listens there
    with pytest.raises(RpcUnreachableError, match=rf"127\.0\.0\.1:{port}.*rpc serve"):
        check_reachable(parse_endpoints(f"127.0.0.1:{port}"), timeout=1)


def _dev(name, free, kind="gpu", endpoint="h:1"):
    return Device(0, name, name, kind, free, free, endpoint)


def test_share_layers_is_proportional_and_complete():
    assert share_layers(10, [1, 1, 1]) == [4, 3, 3]
    assert share_layers(7, [3, 0, 1]) == [5, 0, 2]
    assert sum(share_layers(61, [24.0, 80.0, 16.0])) == 61


WEIGHTS = (None, [1, 1, 1], [1, 0, 1], [0, 0, 1], [5, 1, 1], [3, 1, 2])
_ASSIGNED = re.compile(r"load_tensors: layer +(\d+) assigned to device ([^,]+),")
_OVERRIDDEN = re.compile(r"^tensor (\S+) \(.*\) buffer type overridden to (\S+)")


@pytest.fixture(scope="module")
def layer_counts(fixtures, tmp_path_factory):
    """Models of 4 and 13 trunk layers, with their NextN block and without (trunk only)."""
    d = tmp_path_factory.mktemp("placement")
    fx = fixtures["full"]
    built = build_model(replace(RECIPES["full"], n_trunk=13), d / "t13.gguf", trunk_path=d / "t13-trunk.gguf")
    return [fx.path, fx.trunk, built.integrated, built.trunk]


def test_llama_cpp_puts_every_layer_where_the_plan_says(rpc_pair, layer_counts):
    """llama.cpp itself is asked: each model is loaded (headers only) with each plan over
    two loopback RPC servers and this machine, and the device it logs for every layer
    (``load_tensors: layer N assigned to device D``, the output layer as N = all layers)
    is compared with the plan: each device gets exactly its share of trunk layers, in
    device order, and the NextN block and the output layer are on this machine, their
    tensors pinned there by the plan's overrides (``tensor X buffer type overridden to B``)."""
    endpoints = ",".join(str(s.endpoint) for s in rpc_pair)
    cases = [{"model": str(m), "weights": w} for m in layer_counts for w in WEIGHTS]
    proc = subprocess.run(
        [sys.executable, "-m", __name__, endpoints, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(cases)
    seen_splits = set()
    for case, r in zip(cases, results):
        trunk, nextn, names, layers = r["trunk"], r["nextn"], r["devices"], r["layers"]
        got = [r["assigned"].get(str(il)) for il in range(trunk + nextn + 1)]
        where = f"{case}: llama.cpp put layers on {got}, the plan says {dict(zip(names, layers))}"
        assert sum(layers) == trunk and len(names) == len(set(names)), where
        # the trunk: exactly each device's share, contiguous, remote devices first
        assert got[:trunk] == [n for n, k in zip(names, layers) for _ in range(k)], where
        # the NextN block and the output layer (index trunk + nextn): this machine's device
        assert got[trunk:] == [names[-1]] * (nextn + 1), where
        # and every tensor of those layers is pinned to this machine's buffers, nothing else
        local = {
            t.name
            for t in read_header(case["model"]).tensors
            if t.name.startswith(
                tuple(f"blk.{il}." for il in range(trunk, trunk + nextn)) + ("output.", "output_norm.")
            )
        }
        assert set(r["overridden"]) == local and len(set(r["overridden"].values())) == 1, where
        seen_splits.add((trunk, tuple(layers)))
    assert {n for _, layers in seen_splits for n in layers} >= {0, 1, 2, 3}  # the cases do split differently
    assert {t for t, _ in seen_splits} == {4, 13}


def _assignments(endpoints: str, cases: list[dict]) -> None:
    """Child side: register the servers, then for each case plan the placement as the
    loader does and load the model's headers with it, printing one JSON line per case
    with the device llama.cpp logged for each layer. A child because registering RPC
    servers, like every RPC client, can abort its process."""
    from engine.gguf.validate import validate_path
    from engine.runtime.llama.model import Model
    from engine.runtime.load.placement import LlamaParams
    from engine.runtime.load.rpcdevices import devices

    log: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: log.append(record.getMessage())  # type: ignore[method-assign]
    llama_log = logging.getLogger("llama.cpp")
    llama_log.setLevel(logging.DEBUG)
    llama_log.addHandler(handler)
    remote, local = devices(parse_endpoints(endpoints))
    for case in cases:
        _, facts, _ = validate_path(case["model"])
        nextn = facts.nextn_layers
        trunk = (facts.block_count or 0) - nextn
        weights = case["weights"]
        if weights:  # two remote devices and this machine's: its last weight for any further local GPU
            weights = weights + weights[-1:] * (len(remote) + len(local) - len(weights))
        p = plan_placement(remote, local, n_layer_trunk=trunk, n_nextn=nextn, weights=weights)
        log.clear()
        model = Model.load(case["model"], load_mtp=nextn > 0, placement=LlamaParams(p), metadata_only=True)
        model.close()
        assigned = {int(m[1]): m[2] for line in log if (m := _ASSIGNED.search(line))}
        overridden = {m[1]: m[2] for line in log if (m := _OVERRIDDEN.search(line))}
        print(
            json.dumps(
                {
                    "trunk": trunk,
                    "nextn": nextn,
                    "devices": [d.name for d in p.devices],
                    "layers": p.layers,
                    "assigned": assigned,
                    "overridden": overridden,
                }
            ),
            flush=True,
        )


def test_placement_by_free_memory_and_wrong_weight_counts():
    p = plan_placement(
        [_dev("RPC0", 10), _dev("RPC1", 30)], [_dev("CPU", 20, "cpu", None)], n_layer_trunk=12, n_nextn=1
    )
    assert p.layers == [2, 6, 4]
    with pytest.raises(InvalidSettingError, match="3 devices"):
        plan_placement(
            [_dev("RPC0", 1), _dev("RPC1", 1)],
            [_dev("CPU", 1, "cpu", None)],
            n_layer_trunk=4,
            n_nextn=1,
            weights=[1, 1],
        )


def test_plan_and_build_name_carry_rpc():
    d = Detection(os="Linux", arch="x86_64", cpu="test cpu")
    plain, rpc = make_plan(d), make_plan(d, rpc=True)
    assert RPC_ARGS not in plain.cmake_args and rpc.cmake_args.endswith(RPC_ARGS) and rpc.rpc
    assert any("RPC" in r for r in rpc.reasons)
    assert "-rpc-" in build_name(rpc) and "-rpc" not in build_name(plain)
    exact = make_plan(d, exact=True, rpc=True)
    assert "-DGGML_LLAMAFILE=OFF" in exact.cmake_args and RPC_ARGS in exact.cmake_args


def test_serving_other_machines_needs_an_explicit_yes():
    with pytest.raises(InvalidSettingError, match="no authentication"):
        ServerOptions(host="0.0.0.0").check()
    ok = ServerOptions(host="0.0.0.0", allow_network=True)
    ok.check()
    assert "no authentication" in ok.warning and ServerOptions().warning is None


if __name__ == "__main__":
    _assignments(sys.argv[1], json.loads(sys.argv[2]))
