"""Tiny models that pool, for tests and benchmarks: embedding models (mean, cls or last
pooling, like Qwen3-Embedding) and rerankers (rank pooling with a two-label classifier, like
Qwen3-Reranker), laid out by llama.cpp from their metadata as every fixture in
:mod:`tests.synth.families` is. Random weights: their vectors mean nothing, but llama.cpp's
pooled output for them is what the tests compare.

Building a layout runs llama.cpp on metadata, which can abort the process on a bad shape:
run it in a child (``python -m tests.synth.pooledmodels DIR``, or with ``bench N_EMBD N_HEAD
N_FF N_LAYER`` for a MiniLM-sized embedding model).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.synth.families import arch_kvs
from tests.synth.fixturewriter import fixture_weights, layout, tokenizer_kvs, write_gguf


def write_pooled(
    out: Path, pooling: int, *, seed: int = 0, name: str | None = None, dims: tuple[int, int, int, int] | None = None
) -> Path:
    """A tiny qwen3 model that pools (llama.h: 1 mean, 2 cls, 3 last; 4 rank, with a
    two-label classifier ``cls.output``). ``dims``: (n_embd, n_head, n_ff, n_layer) for a
    larger one (benchmarks), else the tests'."""
    arch = "qwen3"
    tok = tokenizer_kvs()
    n_vocab = len(tok["tokenizer.ggml.tokens"])  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    kind = {1: "embed-mean", 2: "embed-cls", 3: "embed-last", 4: "rerank"}[pooling]
    kvs = (
        arch_kvs(arch, n_vocab, nextn=0)
        | {"general.name": name or f"synthetic {kind}"}
        | tok
        | {f"{arch}.pooling_type": pooling, "tokenizer.ggml.add_eos_token": True}
    )
    if dims is not None:
        n_embd, n_head, n_ff, n_layer = dims
        kvs |= {
            f"{arch}.embedding_length": n_embd,
            f"{arch}.attention.head_count": n_head,
            f"{arch}.attention.head_count_kv": n_head,
            f"{arch}.feed_forward_length": n_ff,
            f"{arch}.block_count": n_layer,
            f"{arch}.features_length": n_embd,
        }
    if pooling == 4:
        kvs[f"{arch}.classifier.output_labels"] = ["yes", "no"]  # softmax over both: the score is p(yes)
    shapes = layout(arch, kvs, out)
    path = out / f"{kind}.gguf"
    write_gguf(path, arch, kvs, fixture_weights(shapes, seed, 0.5))
    return path


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    out = Path(args[0])
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    if args[1:2] == ["bench"]:  # a MiniLM-sized embedding model: bench N_EMBD N_HEAD N_FF N_LAYER
        dims = tuple(int(x) for x in args[2:6])
        print(json.dumps({"mean": str(write_pooled(out, 1, dims=dims, name="synthetic embedder (bench)"))}))  # type: ignore[arg-type]
        return 0
    print(json.dumps({k: str(write_pooled(out, p)) for k, p in (("mean", 1), ("last", 3), ("rank", 4))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
