"""Tiny GGUF models of every MTP family, for tests: a trunk with its NextN (MTP) blocks,
split heads, and Gemma 4 with an assistant.

Hyperparameters are those of the vendored ``tests/test-llama-archs.cpp`` (``get_gguf_ctx``,
the shapes llama.cpp's own CI loads for every architecture), with NextN blocks appended.
Which tensors a family has, and their shapes, is asked of llama.cpp itself: the metadata is
written with gguf-py, ``llama_model_init_from_user`` builds the model from it (with
``load_mtp``, so NextN tensors are created too), and the layout it reports is written back
with gguf-py, with weights of our choosing. No tensor list per family is kept here, so the
fixtures follow llama.cpp's loaders exactly.

Weights are constructed so that drafts get accepted: token embeddings are random with RMS 1
and everything a block adds is small noise, so the trunk's last hidden state is close to
its input token's embedding and the target acts as a bigram model (``output``, random,
picks the successor). Each NextN block's ``eh_proj`` copies the normalised embedding of
its input token, so the head predicts the same successor map. ``noise`` sets how much the
blocks add: more noise, less acceptance.

Building the layout runs llama.cpp on metadata, which can abort the process on a bad
shape: call :func:`write_all` in a child process (``python -m tests.synth.families DIR``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.synth.fixturewriter import assistant_layout, fixture_weights, layout, tokenizer_kvs, write_gguf


N_CTX = 256


@dataclass(frozen=True)
class Fixture:
    """One family's files: ``target`` (integrated unless the family only ships heads apart),
    and where it ships a head apart, ``trunk`` and ``head``."""

    family: str
    arch: str
    n_nextn: int
    files: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------ metadata
def _dims(arch: str) -> tuple[int, int, int, int]:
    """(n_embd, n_head, n_ff, n_layer) as test-llama-archs picks them."""
    if arch == "gemma4":
        return 128, 2, 192, 5
    if arch == "deepseek4":
        return 512, 8, 1024, 4
    if arch == "step35":
        return 160, 2, 384, 2
    if arch in ("deepseek2", "deepseek32", "glm-dsa", "bailingmoe3", "glm5-next"):
        return 128, 1, 192, 2
    if arch in ("nemotron_h", "nemotron_h_moe"):
        return 256, 2, 384, 3
    return 256, 2, 384, 2


def arch_kvs(arch: str, n_vocab: int, *, nextn: int, moe: bool = True) -> dict[str, object]:
    """``{key: value}`` for one family: test-llama-archs' keys (a superset; each
    architecture reads what it needs), per-layer arrays sized for the NextN blocks too."""
    n_embd, n_head, n_ff, n_layer = _dims(arch)
    bc = n_layer + nextn
    head = n_embd // n_head
    mla = arch in ("deepseek2", "deepseek32", "glm-dsa", "bailingmoe3", "glm5-next")
    kv: dict[str, object] = {}

    def a(key: str, value: object) -> None:
        kv[f"{arch}.{key}"] = value

    a("vocab_size", n_vocab)
    a("context_length", N_CTX)
    a("embedding_length", n_embd)
    a("features_length", n_embd)
    a("block_count", bc)
    a("leading_dense_block_count", 1)
    if nextn:
        a("nextn_predict_layers", nextn)
    if arch in ("nemotron_h", "nemotron_h_moe"):
        a("feed_forward_length", [0 if il <= 1 else n_ff for il in range(bc)])
    else:
        a("feed_forward_length", n_ff)
    a("use_parallel_residual", False)
    a("logit_scale", 1.0)
    a("full_attention_interval", 2)
    if arch in ("nemotron_h", "nemotron_h_moe", "bailingmoe3", "glm5-next"):
        per = [0 if il == 1 else n_head for il in range(bc)]
        a("attention.head_count", n_head if arch == "glm5-next" else per)
        a("attention.head_count_kv", per)
    else:
        a("attention.head_count", n_head)
        a("attention.head_count_kv", 1 if arch == "deepseek4" else n_head)
    if arch == "deepseek4":
        a("attention.key_length", head)
        a("attention.value_length", head)
        a("rope.dimension_count", head // 2)
    elif mla:
        a("attention.key_length", 512 if arch == "glm5-next" else 576)
        a("attention.value_length", 512)
        a("rope.dimension_count", 0 if arch == "glm5-next" else 64)
        a("attention.key_length_mla", 192)
        a("attention.value_length_mla", 128)
    a("attention.clamp_kqv", 1.0)
    a("attention.layer_norm_epsilon", 1e-5)
    a("attention.layer_norm_rms_epsilon", 1e-5)
    a("attention.group_norm_epsilon", 1e-5)
    a("attention.group_norm_groups", 8)
    a("attention.q_lora_rank", 64 if arch == "deepseek4" else 512)
    a("attention.kv_lora_rank", 512)
    a("attention.sliding_window", N_CTX // 8)
    if arch == "gemma4":
        a("embedding_length_per_layer_input", n_embd // 2)
        a("attention.shared_kv_layers", 0)
        a("attention.key_length_swa", head)
        a("attention.value_length_swa", head)
        a("rope.freq_base_swa", 10000.0)
        a("attention.sliding_window_pattern", [il % 5 < 4 for il in range(bc)])  # every 5th block full
    elif arch in ("cohere2moe", "mimo2", "step35"):
        a("attention.sliding_window_pattern", [il % 2 == 1 for il in range(bc)])
    else:
        a("attention.sliding_window_pattern", 2)
    if arch == "glm5-next":
        a("hyper_connection.count", 4)
        a("hyper_connection.sinkhorn_iterations", 2)
        a("hyper_connection.epsilon", 1e-6)
        a("hyper_connection.low_rank", 8)
        a("attention.compress_ratios", [4] * bc)
        a("ple.layers", [0])
        a("ple.ngram_size", 3)
        a("ple.heads_per_ngram", 2)
        a("ple.conv_kernel", 4)
        a("ple.eos_token_id", 0)
        a("embedding_length_per_layer_input", n_embd // 4)
        a("ple.layer_multipliers", [1, 3, 5])
        a("ple.head_offsets", [h * n_vocab for h in range(4)])
        a("ple.head_vocab_sizes", [n_vocab] * 4)
    a("attention.indexer.head_count", 64)
    a("attention.indexer.key_length", 128)
    a("attention.indexer.top_k", 131072)
    a("attention.indexer.block_size", 4)
    a("attention.indexer.kpool", 4)
    a("attention.indexer.kpool_select_tail", True)
    a("attention.indexer.local_blocks", 1)
    if arch == "bailingmoe3":
        a("rope.dimension_sections", [8, 12, 12, 0])
    elif arch in ("qwen35", "qwen35moe", "qwen3next"):
        a("rope.dimension_sections", [head // 4] * 4)
    if arch == "deepseek4":
        a("attention.output_group_count", 8)
        a("attention.output_lora_rank", 32)
        a("attention.compress_ratios", ([0, 0, 4, 128] + [0] * nextn)[:bc])
        a("attention.compress_rope_freq_base", 160000.0)
        a("hyper_connection.count", 4)
        a("hyper_connection.sinkhorn_iterations", 2)
        a("hyper_connection.epsilon", 1e-6)
        a("hash_layer_count", 0)
        a("swiglu_clamp_exp", 10.0)
        a("expert_weights_scale", 1.0)
        a("expert_weights_norm", True)
    if moe:
        a("expert_feed_forward_length", n_ff)
        a("expert_shared_feed_forward_length", n_ff // 2)
        a("expert_latent_length", n_ff)
        a("interleave_moe_layer_step", 2)
        a("expert_count", 2)
        a("expert_used_count", 2)
        a("expert_shared_count", 1)
        a("expert_gating_func", 4 if arch == "deepseek4" else 2)
        a("expert_group_scale", 1.0)
        a("experts_per_group", 1)
    a("ssm.inner_size", 256 if arch in ("qwen3next", "qwen35", "qwen35moe") else 2 * n_embd)
    a("ssm.conv_kernel", 4)
    a("ssm.state_size", 128)
    a("ssm.time_step_rank", n_head)
    a("ssm.group_count", 2)
    a("kda.head_dim", 128)
    a("kda.safe_gate", True)
    a("kda.gate_lower_bound", -5.0)
    a("time_mix_extra_dim", 64)
    a("time_decay_extra_dim", 128)
    a("wkv.head_size", n_embd // n_head)
    a("shortconv.l_cache", 3)
    a("residual_scale", 3.5565588200778455)
    a("attn_res.block_size", 12)
    a("activation.situ_beta", 4.0)
    a("activation.situ_linear_beta", 25.0)
    if arch == "bailingmoe3":
        a("swiglu_clamp_exp", ([0.0, 4.0] + [4.0] * nextn)[:bc])
        a("swiglu_clamp_shexp", ([0.0, 5.0] + [5.0] * nextn)[:bc])
    return kv


def assistant_kvs(target_n_embd: int, n_vocab: int, n_layer: int = 2) -> dict[str, object]:
    """A Gemma 4 assistant (its own architecture): every block a NextN block, reading the
    target's KV cache; ``embedding_length_out`` is the target's hidden size."""
    arch, n_embd, n_head, head = "gemma4-assistant", 64, 2, 64
    return {
        f"{arch}.vocab_size": n_vocab,
        f"{arch}.context_length": N_CTX,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.embedding_length_out": target_n_embd,
        f"{arch}.block_count": n_layer,
        f"{arch}.nextn_predict_layers": n_layer,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": 1,
        f"{arch}.attention.key_length": head,
        f"{arch}.attention.value_length": head,
        f"{arch}.attention.key_length_swa": head,
        f"{arch}.attention.value_length_swa": head,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.attention.sliding_window": N_CTX // 8,
        f"{arch}.attention.sliding_window_pattern": [il < n_layer - 1 for il in range(n_layer)],
        f"{arch}.rope.freq_base": 1000000.0,
        f"{arch}.rope.freq_base_swa": 10000.0,
        f"{arch}.rope.dimension_count": head,
    }


# ------------------------------------------------------------------- families
#: family name → (architecture, NextN layers); integrated files unless said otherwise
INTEGRATED = {
    "qwen35moe": ("qwen35moe", 1),
    "qwen3next": ("qwen3next", 1),
    "glm4moe": ("glm4moe", 1),
    "deepseek2": ("deepseek2", 1),  # GLM-4.7-Flash: MLA
    "deepseek32": ("deepseek32", 1),
    "glm-dsa": ("glm-dsa", 1),
    "bailingmoe3": ("bailingmoe3", 1),
    "cohere2moe": ("cohere2moe", 1),
    "nemotron_h_moe": ("nemotron_h_moe", 1),
    "step35": ("step35", 3),  # chained heads
    "mimo2": ("mimo2", 2),  # chained heads (fused attn_qkv)
    "hy_v3": ("hy_v3", 2),  # chained heads
    "glm5-next": ("glm5-next", 1),  # loads; no MTP graph
}


#: architectures whose converter writes attention as one fused attn_qkv (and whose MTP
#: graph needs it: a layout from metadata lays out attn_q/k/v instead)
FUSED_QKV = ("mimo2",)


def _fuse_qkv(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Every block's attn_q/k/v weights as one ``attn_qkv.weight`` (their rows stacked),
    their scales dropped (llama.cpp reads none for a fused weight); biases stay apart, as
    ``create_tensor_qkv`` allows."""
    out = dict(shapes)
    for name, ne in shapes.items():
        if name.endswith(".attn_q.weight"):
            b = name.removesuffix(".attn_q.weight")
            parts = [out.pop(f"{b}.attn_{x}.weight") for x in "qkv"]
            out[f"{b}.attn_qkv.weight"] = (ne[0], sum(p[1] for p in parts))
            for x in "qkv":
                for kind in ("scale", "input_scale"):
                    out.pop(f"{b}.attn_{x}.{kind}", None)
    return out


def _split(shapes: dict[str, tuple[int, ...]], n_layer: int) -> tuple[set[str], set[str]]:
    """(trunk tensors, head tensors): the head keeps the NextN blocks and the shared ends."""
    shared = {"token_embd.weight", "output_norm.weight", "output.weight"}
    head, trunk = set(), set()
    for name in shapes:
        if name.startswith("blk."):
            (head if int(name.split(".")[1]) >= n_layer else trunk).add(name)
        else:
            trunk.add(name)
            if name in shared:
                head.add(name)
    return trunk, head


def write_family(
    family: str,
    out: Path,
    *,
    noise: float = 0.02,
    seed: int = 0,
    split: bool = False,
    nextn: int | None = None,
    extra: dict[str, object] | None = None,
    fuse: bool = True,
) -> Fixture:
    """Write one family's fixture into ``out``. ``split``: also as a trunk and an
    ``mtp-`` head; ``nextn`` / ``extra``: other NextN counts or keys, ``fuse=False``:
    mimo2 with separate attn_q/k/v (for refusals)."""
    tok = tokenizer_kvs()
    n_vocab = len(tok["tokenizer.ggml.tokens"])  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    if family == "gemma4":
        return _write_gemma4(out, tok, n_vocab, noise, seed)
    if family == "deepseek4":
        return _write_deepseek4(out, tok, n_vocab, noise, seed)
    arch, default_nextn = INTEGRATED[family]
    nextn = default_nextn if nextn is None else nextn
    kvs = arch_kvs(arch, n_vocab, nextn=nextn) | {"general.name": f"synthetic {family}"} | tok | (extra or {})
    shapes = layout(arch, kvs, out)
    if arch in FUSED_QKV and fuse:
        shapes = _fuse_qkv(shapes)
    weights = fixture_weights(shapes, seed, noise)
    target = out / f"{family}.gguf"
    write_gguf(target, arch, kvs, weights)
    files = {"target": str(target)}
    if split:  # the same model as a trunk and a separate mtp- head, as the converter's --no-mtp / --mtp write it
        n_layer = _dims(arch)[3]
        trunk_names, head_names = _split(shapes, n_layer)
        trunk_kvs = arch_kvs(arch, n_vocab, nextn=0) | {"general.name": f"synthetic {family} trunk"} | tok
        write_gguf(out / f"{family}-trunk.gguf", arch, trunk_kvs, {n: weights[n] for n in sorted(trunk_names)})
        write_gguf(out / f"mtp-{family}.gguf", arch, kvs, {n: weights[n] for n in sorted(head_names)})
        # a trunk that still declares its NextN layers (llama.cpp's converter with --no-mtp)
        write_gguf(out / f"{family}-trunkonly.gguf", arch, kvs, {n: weights[n] for n in sorted(trunk_names)})
        files |= {
            "trunk": str(out / f"{family}-trunk.gguf"),
            "head": str(out / f"mtp-{family}.gguf"),
            "trunk_only": str(out / f"{family}-trunkonly.gguf"),
        }
    return Fixture(family, arch, nextn, files)


def _write_deepseek4(out: Path, tok: dict, n_vocab: int, noise: float, seed: int) -> Fixture:
    """DeepSeek V4 ships its head only apart, as its converter writes them: a trunk with
    no NextN keys, and an ``mtp-`` head (``block_count`` one more, the last block a full
    block plus its nextn tensors) with root-level ``output_hc_*`` of its own.

    llama.cpp keeps V4's NextN layer only when the probe tensor is in the file, which a
    layout from metadata cannot have: the head block is laid out as a trunk block of a
    one-block-longer model, and its nextn tensors are added as ``deepseek4.cpp`` creates them."""
    arch = "deepseek4"
    n_embd, _, _, n_layer = _dims(arch)
    trunk_kvs = arch_kvs(arch, n_vocab, nextn=0) | tok
    shapes = layout(arch, trunk_kvs, out)
    weights = fixture_weights(shapes, seed, noise)
    trunk = out / "deepseek4.gguf"
    write_gguf(trunk, arch, trunk_kvs | {"general.name": "synthetic deepseek4"}, weights)

    head_kvs = arch_kvs(arch, n_vocab, nextn=1) | tok | {"general.name": "synthetic deepseek4 MTP head"}
    longer = arch_kvs(arch, n_vocab, nextn=1) | tok
    longer.pop(f"{arch}.nextn_predict_layers")
    long_shapes = layout(arch, longer, out)
    b = f"blk.{n_layer}"
    head_shapes = {n: ne for n, ne in long_shapes.items() if n.startswith(b + ".")}
    head_shapes |= {
        f"{b}.nextn.eh_proj.weight": (2 * n_embd, n_embd),
        f"{b}.nextn.enorm.weight": (n_embd,),
        f"{b}.nextn.hnorm.weight": (n_embd,),
        f"{b}.nextn.shared_head_norm.weight": (n_embd,),
    }
    head_w = fixture_weights(head_shapes, seed + 1, noise)
    for name in ("token_embd.weight", "output_norm.weight", "output.weight"):
        head_w[name] = weights[name]
    rng = np.random.default_rng([seed, 99])
    for name in shapes:
        if name.startswith("output_hc_"):  # the head's own, not the trunk's
            head_w[name] = (weights[name] + rng.standard_normal(weights[name].shape) * noise).astype(np.float32)
    head = out / "mtp-deepseek4.gguf"
    write_gguf(head, arch, head_kvs, dict(sorted(head_w.items())))
    return Fixture("deepseek4", arch, 1, {"target": str(trunk), "head": str(head)})


def _write_gemma4(out: Path, tok: dict, n_vocab: int, noise: float, seed: int) -> Fixture:
    arch = "gemma4"
    kvs = arch_kvs(arch, n_vocab, nextn=0, moe=False) | tok | {"general.name": "synthetic gemma4"}
    shapes = layout(arch, kvs, out)
    weights = fixture_weights(shapes, seed, noise)
    akvs = assistant_kvs(_dims(arch)[0], n_vocab) | tok | {"general.name": "synthetic gemma4 assistant"}
    ashapes = assistant_layout(akvs)
    aw = fixture_weights(ashapes, seed + 1, noise)
    # The assistant's pre-projection passes on the first n_embd dimensions of the target's
    # embedding of the token, and its tied output is the target's output on those
    # dimensions: the target's output reads only them, so the assistant ranks successors
    # as the (bigram) target does.
    n_embd = ashapes["token_embd.weight"][0]
    weights["output.weight"][:, n_embd:] = 0.0
    aw["token_embd.weight"] = np.ascontiguousarray(weights["output.weight"][:, :n_embd])
    target = out / "gemma4.gguf"
    write_gguf(target, arch, kvs, weights)
    assistant = out / "gemma4-assistant.gguf"
    write_gguf(assistant, "gemma4-assistant", akvs, aw)
    return Fixture(
        "gemma4", arch, akvs["gemma4-assistant.nextn_predict_layers"], {"target": str(target), "head": str(assistant)}
    )  # type: ignore[arg-type]


FIXTURES = (*INTEGRATED, "deepseek4", "gemma4")


#: families whose fixture is also written as a trunk and a separate head (compose tests)
SPLIT = ("qwen35moe", "glm4moe", "deepseek2", "step35")


def write_all(out: Path, families: tuple[str, ...] = FIXTURES, *, noise: float = 0.02) -> dict[str, Fixture]:
    return {f: write_family(f, out, noise=noise, split=f in SPLIT) for f in families}


def write_refusals(out: Path) -> dict[str, str]:
    """Files llama.cpp would abort on, for the refusal tests: two NextN layers where the
    MTP graph asserts one, a hybrid with no recurrent block, and mimo2 NextN blocks
    without the fused attn_qkv its MTP graph asserts on."""
    bad = out / "refusals"
    two = write_family("qwen35moe", bad / "two", nextn=2).files["target"]
    flat = write_family("qwen35moe", bad / "flat", extra={"qwen35moe.full_attention_interval": 1}).files["target"]
    unfused = write_family("mimo2", bad / "unfused", fuse=False).files["target"]
    return {"two_nextn": two, "no_recurrent": flat, "unfused_qkv": unfused}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    out = Path(args[0])
    families = tuple(args[1:]) or FIXTURES
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    fixtures = write_all(out, families)
    index: dict[str, object] = {k: {"arch": v.arch, "n_nextn": v.n_nextn, **v.files} for k, v in fixtures.items()}
    if not args[1:]:
        index["refusals"] = write_refusals(out)
    print(json.dumps(index))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
