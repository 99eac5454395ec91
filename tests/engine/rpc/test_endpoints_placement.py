"""Endpoint lists, the layer split and the build plan: the parts that need no server."""

from __future__ import annotations

import bisect

import pytest

from engine.backends.builds import build_name
from engine.backends.detect import Detection
from engine.backends.plan import RPC_ARGS, make_plan
from engine.errors import InvalidSettingError, RpcUnreachableError
from engine.rpc.endpoints import Endpoint, check_reachable, parse_endpoints, parse_tensor_split
from engine.rpc.server import ServerOptions
from engine.runtime.load.rpcdevices import Device, Placement, plan_placement, share_layers
from tests.engine.rpc.conftest import free_port


def test_endpoints_parse_and_bad_ones_say_what_is_wrong():
    assert parse_endpoints("127.0.0.1:50052, 10.0.0.2:6000") == (Endpoint("127.0.0.1", 50052), Endpoint("10.0.0.2", 6000))
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


def assigned_device(p: Placement, il: int, n_layer_all: int) -> str:
    """Which device llama.cpp assigns layer ``il`` to under ``p``: its own rule
    (``llama_model_base::load_tensors``), replayed; ``n_layer_all`` is the output's index."""
    start = max(n_layer_all + 1 - p.n_gpu_layers, 0)
    act = min(p.n_gpu_layers, n_layer_all + 1) if p.devices else 0
    if il < start or il - start >= act:
        return "CPU"
    total, cum, run = sum(p.tensor_split), [], 0.0
    for x in p.tensor_split:
        run += x
        cum.append(run / total)
    return p.devices[bisect.bisect_right(cum, (il - start) / act)].name


def _dev(name, free, kind="gpu", endpoint="h:1"):
    return Device(0, name, name, kind, free, free, endpoint)


def test_share_layers_is_proportional_and_complete():
    assert share_layers(10, [1, 1, 1]) == [4, 3, 3]
    assert share_layers(7, [3, 0, 1]) == [5, 0, 2]
    assert sum(share_layers(61, [24.0, 80.0, 16.0])) == 61


@pytest.mark.parametrize("trunk,nextn", [(4, 1), (61, 1), (28, 0), (3, 2)])
@pytest.mark.parametrize(
    "remote,local,weights",
    [
        ([_dev("RPC0", 8), _dev("RPC1", 16)], [_dev("CPU", 32, "cpu", None)], None),
        ([_dev("RPC0", 8)], [_dev("CUDA0", 24, "gpu", None)], None),
        ([_dev("RPC0", 8), _dev("RPC1", 8)], [_dev("CPU", 8, "cpu", None)], [1, 0, 1]),
        ([_dev("RPC0", 8), _dev("RPC1", 8)], [_dev("CPU", 8, "cpu", None)], [0, 0, 1]),
        ([_dev("RPC0", 1)], [_dev("CUDA0", 1, "gpu", None), _dev("CUDA1", 1, "gpu", None)], [5, 1, 1]),
    ],
)
def test_llama_cpp_puts_every_layer_where_the_plan_says(trunk, nextn, remote, local, weights):
    """Replays llama.cpp's own assignment rule on the plan's parameters: each device gets
    exactly its share of trunk layers, and the NextN block and the output layer are local."""
    p = plan_placement(remote, local, n_layer_trunk=trunk, n_nextn=nextn, weights=weights)
    n_all = trunk + nextn
    got = [assigned_device(p, il, n_all) for il in range(trunk)]
    assert [got.count(d.name) for d in p.devices] == p.layers and sum(p.layers) == trunk
    assert got == sorted(got, key=[d.name for d in p.devices].index)  # contiguous, remote first
    for il in range(trunk, n_all + 1):  # NextN layers, then the output
        assert assigned_device(p, il, n_all) == p.local.name == local[-1].name
    assert p.local_patterns[-2:] == [r"^output\.", r"^output_norm\."]
    assert [rf"^blk\.{il}\." for il in range(trunk, n_all)] == p.local_patterns[:-2]


def test_placement_by_free_memory_and_wrong_weight_counts():
    p = plan_placement([_dev("RPC0", 10), _dev("RPC1", 30)], [_dev("CPU", 20, "cpu", None)], n_layer_trunk=12, n_nextn=1)
    assert p.layers == [2, 6, 4]
    with pytest.raises(InvalidSettingError, match="3 devices"):
        plan_placement([_dev("RPC0", 1), _dev("RPC1", 1)], [_dev("CPU", 1, "cpu", None)], n_layer_trunk=4, n_nextn=1,
                       weights=[1, 1])  # fmt: skip


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
