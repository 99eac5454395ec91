"""``mtp-studio bench compose``: compose speed against ``cp``, peak memory, and header
parse time with a 262k-token vocabulary.

The target is generated: a qwen35-style header with a realistic tokenizer (262,144
tokens, 250,000 merges) and zero-filled tensors up to the requested size, plus a
matching MTP head. Zero data is fine for timing; it is written for real (not sparse),
so ``cp`` and compose move the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import child_env
from engine.gguf import codec
from engine.gguf.constants import TensorType, ValueType, pad
from engine.gguf.reader import read_header

V = ValueType
ARCH = "qwen35"
_ZERO = bytes(16 << 20)


def _meta(n_layers: int, nextn: int, n_embd: int, vocab: int, merges: int) -> list[bytes]:
    a = ARCH
    bc = n_layers + nextn
    kvs = [
        codec.encode_kv("general.architecture", V.STRING, a),
        codec.encode_kv("general.name", V.STRING, "compose benchmark (zero weights)"),
        codec.encode_kv("general.alignment", V.UINT32, 32),
        codec.encode_kv(f"{a}.block_count", V.UINT32, bc),
        codec.encode_kv(f"{a}.context_length", V.UINT32, 262144),
        codec.encode_kv(f"{a}.embedding_length", V.UINT32, n_embd),
        codec.encode_kv(
            f"{a}.attention.recurrent_layers", V.ARRAY, [i < n_layers and (i + 1) % 4 != 0 for i in range(bc)], V.BOOL
        ),
    ]
    if nextn:
        kvs.append(codec.encode_kv(f"{a}.nextn_predict_layers", V.UINT32, nextn))
    tokens = [f"tok{i}" for i in range(vocab)]
    kvs += [
        codec.encode_kv("tokenizer.ggml.model", V.STRING, "gpt2"),
        codec.encode_kv("tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING),
        codec.encode_array_raw("tokenizer.ggml.token_type", V.INT32, vocab, b"\x01\x00\x00\x00" * vocab),
        codec.encode_kv("tokenizer.ggml.merges", V.ARRAY, [f"t{i} k{i}" for i in range(merges)], V.STRING),
    ]
    return kvs


def _write(path: Path, kvs: list[bytes], tensors: list[tuple[str, tuple[int, ...]]]) -> None:
    records, layout, off = [], [], 0
    for name, dims in tensors:
        n = dims[0] * (dims[1] if len(dims) > 1 else 1)
        records.append(codec.encode_tensor_info(name, dims, int(TensorType.F16), off))
        layout.append(off + 2 * n)
        off = pad(off + 2 * n, 32)
    header = codec.header_prefix(3, len(records), len(kvs)) + b"".join(kvs) + b"".join(records)
    with open(path, "wb") as f:
        f.write(header)
        f.write(bytes(pad(len(header), 32) - len(header)))
        left = off
        while left:
            n = min(left, len(_ZERO))
            f.write(_ZERO[:n])
            left -= n


def make_models(folder: Path, size_bytes: int, vocab: int = 262144, merges: int = 250000) -> tuple[Path, Path]:
    n_embd = 4096
    row = n_embd * 2
    per_layer = size_bytes // 40
    tensors = [("token_embd.weight", (n_embd, vocab // 8)), ("output_norm.weight", (n_embd,))]
    n_layers = 40
    for il in range(n_layers):
        tensors.append((f"blk.{il}.ffn_up.weight", (n_embd, max(1, per_layer // row))))
    target = folder / "bench-target.gguf"
    _write(target, _meta(n_layers, 0, n_embd, vocab, merges), tensors)
    head_tensors = [("token_embd.weight", (n_embd, vocab // 8)), ("output_norm.weight", (n_embd,))]
    head_tensors += [
        (f"blk.{n_layers}.nextn.eh_proj.weight", (2 * n_embd, n_embd)),
        (f"blk.{n_layers}.nextn.enorm.weight", (n_embd,)),
        (f"blk.{n_layers}.nextn.hnorm.weight", (n_embd,)),
        (f"blk.{n_layers}.ffn_up.weight", (n_embd, 4096)),
    ]
    head = folder / "mtp-bench-target.gguf"
    _write(head, _meta(n_layers, 1, n_embd, vocab, merges), head_tensors)
    return target, head


_CHILD = """
import json, resource, sys, time
from engine.gguf.compose import compose
t = time.perf_counter()
compose(sys.argv[1], sys.argv[2], sys.argv[3], overwrite=True)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run(size_gb: float, folder: Path | None, runs: int, as_json: bool) -> int:
    tmp = tempfile.TemporaryDirectory(dir=folder)
    d = Path(tmp.name)
    try:
        t0 = time.perf_counter()
        target, head = make_models(d, int(size_gb * (1 << 30)))
        gen_s = time.perf_counter() - t0
        size = target.stat().st_size
        parse = []
        for _ in range(5):
            t = time.perf_counter()
            h = read_header(target)
            parse.append(time.perf_counter() - t)
        n_tokens = h.kvs["tokenizer.ggml.tokens"].count
        n_merges = h.kvs["tokenizer.ggml.merges"].count
        cp_s, cp_sync_s, compose_s, rss = [], [], [], []
        env = child_env()
        for i in range(runs + 1):  # run 0 warms the page cache and is discarded
            os.sync()
            t = time.perf_counter()
            subprocess.run(["cp", str(target), str(d / "copy.gguf")], check=True)
            t_cp = time.perf_counter() - t
            os.sync()  # compose fsyncs its output; a fair cp is a durable cp
            t_cp_sync = time.perf_counter() - t
            (d / "copy.gguf").unlink()
            os.sync()
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, str(target), str(head), str(d / "composite.gguf")],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            (d / "composite.gguf").unlink()
            if i == 0:
                continue
            cp_s.append(t_cp)
            cp_sync_s.append(t_cp_sync)
            compose_s.append(r["seconds"])
            rss.append(r["peak_rss_kb"] / 1024)
        result = {
            "target_bytes": size,
            "generate_seconds": gen_s,
            "header_parse_seconds_median": statistics.median(parse),
            "vocab_tokens": n_tokens,
            "merges": n_merges,
            "cp_seconds": cp_s,
            "cp_sync_seconds": cp_sync_s,
            "compose_seconds": compose_s,
            "compose_over_cp_sync": statistics.median(compose_s) / statistics.median(cp_sync_s),
            "compose_over_cp": statistics.median(compose_s) / statistics.median(cp_s),
            "peak_rss_mb": max(rss),
        }
    finally:
        tmp.cleanup()
    if as_json:
        print(json.dumps(result))
    else:
        print(f"target: {size / 2**30:.2f} GiB, {n_tokens} tokens, {n_merges} merges")
        print(f"header parse: {result['header_parse_seconds_median'] * 1000:.0f} ms (median of 5)")
        print(f"cp:        {', '.join(f'{x:.2f}' for x in cp_s)} s")
        print(f"cp + sync: {', '.join(f'{x:.2f}' for x in cp_sync_s)} s")
        print(f"compose:   {', '.join(f'{x:.2f}' for x in compose_s)} s (validated, fsynced)")
        print(
            f"compose / (cp + sync): {result['compose_over_cp_sync']:.2f}   compose / cp: "
            f"{result['compose_over_cp']:.2f}   "
            f"peak RSS: {result['peak_rss_mb']:.0f} MB"
        )
    return 0


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Compose time vs cp, peak RSS, 262k-vocab header parse time.")
    p.add_argument("--size-gb", type=float, default=4.0, help="size of the generated target (default 4)")
    p.add_argument("--dir", type=Path, default=None, help="folder on the disk to test (default: temp dir)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.models.compose") -> int:
    args = parser(prog).parse_args(argv)
    return run(args.size_gb, args.dir, args.runs, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
