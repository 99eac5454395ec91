"""The raw-span header parser: every value type, agreement with gguf-py, and fuzzing."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from engine.errors import GGUFError
from engine.gguf import codec
from engine.gguf.constants import ValueType
from engine.gguf.reader import parse_buffer, read_header
from engine.gguf.shards import parse_shard_name
from tests.engine.gguf.craft import f32_tensor_file, kv

V = ValueType
SCALARS = [
    ("t.u8", V.UINT8, 255),
    ("t.i8", V.INT8, -128),
    ("t.u16", V.UINT16, 65535),
    ("t.i16", V.INT16, -32768),
    ("t.u32", V.UINT32, 2**32 - 1),
    ("t.i32", V.INT32, -(2**31)),
    ("t.f32", V.FLOAT32, 1.5),
    ("t.bool", V.BOOL, True),
    ("t.str", V.STRING, "héllo wörld"),
    ("t.u64", V.UINT64, 2**64 - 1),
    ("t.i64", V.INT64, -(2**63)),
    ("t.f64", V.FLOAT64, -2.25),
]
ARRAYS = [
    ("a.u8", V.UINT8, [0, 1, 255]),
    ("a.i8", V.INT8, [-128, 0, 127]),
    ("a.u16", V.UINT16, [0, 65535]),
    ("a.i16", V.INT16, [-32768, 5, 32767]),
    ("a.u32", V.UINT32, [1, 2, 3]),
    ("a.i32", V.INT32, [-1, 0, 1]),
    ("a.f32", V.FLOAT32, [0.5, -1.0]),
    ("a.bool", V.BOOL, [True, False, True]),
    ("a.str", V.STRING, ["", "a", "ünï"]),
    ("a.u64", V.UINT64, [2**64 - 1]),
    ("a.i64", V.INT64, [-(2**63), 7]),
    ("a.f64", V.FLOAT64, [3.25]),
    ("a.empty", V.INT16, []),
]


@pytest.fixture(scope="module")
def every_type(tmp_path_factory):
    kvs = [kv(k, t, v) for k, t, v in SCALARS] + [kv(k, V.ARRAY, v, t) for k, t, v in ARRAYS]
    p = tmp_path_factory.mktemp("kv") / "types.gguf"
    return f32_tensor_file(p, [("w", (4, 2)), ("b", (3,))], kvs)


def test_every_kv_type_round_trips(every_type):
    h = read_header(every_type)
    for key, t, v in SCALARS:
        assert h.kvs[key].type == t and h.kvs[key].value == v
    for key, t, v in ARRAYS:
        got = h.kvs[key]
        assert got.type == V.ARRAY and got.elem_type == t and got.count == len(v)
        assert got.value == v
    # raw spans re-encode to the same bytes
    for key, t, v in SCALARS:
        assert h.kvs[key].raw == codec.encode_kv(key, t, v)
    for key, t, v in ARRAYS:
        assert h.kvs[key].raw == codec.encode_kv(key, V.ARRAY, v, t)
    assert [t.name for t in h.tensors] == ["w", "b"] and h.tensors[1].offset == 32


def test_agrees_with_gguf_py(every_type, fixtures):
    from gguf import GGUFReader

    for path in (every_type, fixtures["partial"].path, fixtures["full"].head):
        ours = read_header(path)
        theirs = GGUFReader(path)
        assert [f.name for f in theirs.fields.values()][3:] == [kv.key for kv in ours.kv_list]
        assert [
            (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset)) for t in theirs.tensors
        ] == [(t.name, t.dims, t.type, ours.data_offset + t.offset) for t in ours.tensors]
        for f in theirs.fields.values():
            if f.name in ours.kvs and f.types and f.types[0] != 9:
                assert f.contents() == pytest.approx(ours.kvs[f.name].value)


def test_numeric_arrays_decode_in_one_call(every_type):
    h = read_header(every_type)
    arr = h.kvs["a.i16"].array_numpy()
    assert arr.dtype == np.dtype("<i2") and arr.tolist() == [-32768, 5, 32767]


@pytest.mark.parametrize(
    "name,expected",
    [
        ("m-00001-of-00003.gguf", ("m", 1, 3)),
        ("a-b-c-00012-of-00100.gguf", ("a-b-c", 12, 100)),
        ("model.gguf", None),
        ("m-1-of-3.gguf", None),
    ],
)
def test_shard_names(name, expected):
    got = parse_shard_name(name)
    assert (got.prefix, got.no, got.count) == expected if expected else got is None


def test_big_endian_is_rejected(tmp_path):
    p = f32_tensor_file(tmp_path / "be.gguf", [("w", (4,))], big_endian=True)
    with pytest.raises(GGUFError, match="big-endian") as e:
        read_header(p)
    assert e.value.code == "big_endian"


def test_nested_arrays_are_rejected(tmp_path):
    nested = codec.encode_string("n") + struct.pack("<IIQ", V.ARRAY, V.ARRAY, 1) + struct.pack("<IQ", V.UINT8, 0)
    p = f32_tensor_file(tmp_path / "nested.gguf", [("w", (4,))], [nested])
    with pytest.raises(GGUFError, match="nested array"):
        read_header(p)


def _fuzz_one(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    mode = rng.random()
    if mode < 0.4:
        return bytes(b[: rng.randrange(len(b))])
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        if mode < 0.7:
            b[i] ^= 1 << rng.randrange(8)
        else:
            b[i] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    return bytes(b)


def test_fuzzed_headers_raise_typed_errors_only(fixtures, every_type):
    """Random truncations and byte flips: a typed error or a successful parse, never
    another exception, a hang, or a read past the bytes given (the buffer is exactly
    the bytes given, so any read past it would raise IndexError/struct.error)."""
    rng = random.Random(1234)
    seeds = []
    for path in (every_type, fixtures["partial"].path, fixtures["full"].head):
        h = read_header(path)
        seeds.append(path.read_bytes()[: h.header_end + 64])
    outcomes = {"ok": 0, "error": 0}
    for i in range(4000):
        data = _fuzz_one(seeds[i % len(seeds)], rng)
        try:
            parse_buffer(data, len(data), "fuzz")
            outcomes["ok"] += 1
        except GGUFError:
            outcomes["error"] += 1
    assert outcomes["error"] > 1000 and outcomes["ok"] > 100


def test_fuzzed_files_never_crash_validation(fixtures, tmp_path):
    from engine.gguf.validate import validate_path

    rng = random.Random(99)
    data = fixtures["full"].path.read_bytes()
    h = read_header(fixtures["full"].path)
    p = tmp_path / "f.gguf"
    invalid = 0
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(h.header_end)
            b[i] ^= 1 << rng.randrange(8)
        p.write_bytes(bytes(b[: rng.choice([len(b), rng.randrange(len(b))])]))
        report, _, _ = validate_path(p)
        invalid += not report.valid
    assert invalid > 100
