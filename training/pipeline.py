"""The whole recipe in steps, each reusing what the previous one left in the output folder:
``prepare`` (corpus, tokenizer, token streams) -> ``train`` (resumable) -> ``export`` (GGUF)
-> ``parity`` (llama.cpp vs PyTorch)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from training import corpus, data
from training import tokenizer as tk
from training.model import ModelConfig, count_parameters
from training.train import TrainConfig


@dataclass(frozen=True)
class Preset:
    vocab_size: int
    model: dict = field(default_factory=dict)
    train: TrainConfig = TrainConfig()
    max_source_files: int | None = None  # None: the whole standard library


PRESETS = {
    # the shipped demo: 3.9M parameters, ~75 minutes on one CPU thread
    "demo": Preset(vocab_size=4096, train=TrainConfig(steps=2400)),
    # CI's smoke run: a few steps of a tiny model on a few files, then export and parity
    "smoke": Preset(
        vocab_size=400,
        model=dict(
            n_embd=64,
            n_ff=128,
            n_trunk=2,
            full_attention_interval=2,
            n_head=2,
            n_head_kv=1,
            head_dim=24,
            ssm_state=16,
            ssm_heads=2,
        ),
        train=TrainConfig(
            steps=6,
            batch=4,
            seq_len=64,
            warmup=2,
            distill_fraction=0.34,
            eval_every=6,
            eval_windows=4,
            checkpoint_every=3,
        ),
        max_source_files=12,
    ),
}

PARITY_TEXT = (
    'import os\n\n\ndef read_text(path):\n    """Return the text of the file at path."""\n'
    "    with open(path) as f:\n        return f.read()\n"
)


def model_config(preset: Preset, n_vocab: int) -> ModelConfig:
    return ModelConfig(n_vocab=n_vocab, **preset.model)


def _documents(preset: Preset) -> list[corpus.Document]:
    docs = corpus.documents()
    if preset.max_source_files is not None:
        keep = {d.name for d in docs if d.source == "stdlib-source"}
        keep = set(sorted(keep)[: preset.max_source_files])
        docs = [d for d in docs if d.source != "stdlib-source" or d.name in keep]
        modules = {n.split(":", 1)[1] for n in keep}
        docs = [d for d in docs if d.source != "stdlib-docstrings" or d.name.split(":")[1] in modules]
    return docs


def prepare(out: Path, preset: Preset) -> None:
    """Corpus manifest, tokenizer and token streams (skipped when already there)."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / "train.npy").exists() and (out / "tokenizer.json").exists():
        return
    docs = _documents(preset)
    tok = tk.train((d.text for d in docs if not d.held_out), preset.vocab_size)
    tok.save(str(out / "tokenizer.json"))
    seed = preset.train.seed
    train_ids = data.token_stream(docs, tok, held_out=False, seed=seed)
    held_ids = data.token_stream(docs, tok, held_out=True, seed=seed)
    for name, arr in (("train.npy", train_ids), ("held_out.npy", held_ids)):
        tmp = out / (name + ".partial.npy")
        np.save(tmp, arr)
        tmp.replace(out / name)
    data.save_json(
        out / "corpus.json",
        dict(
            corpus.manifest(docs),
            train_tokens=int(len(train_ids)),
            held_out_tokens=int(len(held_ids)),
            vocab_size=tok.get_vocab_size(),
        ),
    )


def run_training(out: Path, preset: Preset, *, minutes: float | None = None):
    from training import train as tr

    prepare(out, preset)
    tok = tk.load(out / "tokenizer.json")
    mcfg = model_config(preset, tok.get_vocab_size())
    deadline = time.time() + minutes * 60 if minutes else None
    log_path = out / "log.jsonl"

    def log(record: dict) -> None:
        line = json.dumps(record)
        print(line, flush=True)
        with log_path.open("a") as f:
            f.write(line + "\n")

    log(
        {
            "event": "start",
            "parameters": count_parameters(tr.Qwen35(mcfg)),
            "model": mcfg.to_dict(),
            "train": asdict(preset.train),
        }
    )
    return tr.train(
        out, mcfg, preset.train, np.load(out / "train.npy"), np.load(out / "held_out.npy"), deadline=deadline, log=log
    )


def load_finished(out: Path):
    """(model, checkpoint state) of a finished run in ``out``."""
    from training.train import load_trained

    model, state = load_trained(out)
    if state["step"] < state["train_config"]["steps"]:
        raise SystemExit(
            f"training stopped at step {state['step']} of {state['train_config']['steps']}: resume it first"
        )
    return model, state


def export_gguf(
    out: Path, gguf: Path, *, dtype: str = "f16", name: str = "MTP Studio demo (trained)", model=None
) -> Path:
    """Write the finished model of ``out`` (or ``model``, already loaded from it) to ``gguf``."""
    from training.export import export

    if model is None:
        model, _ = load_finished(out)
    vocab = tk.to_vocab(tk.load(out / "tokenizer.json"))
    meta = json.loads((out / "corpus.json").read_text())
    extra = (
        ("general.license", "MIT"),
        (
            "general.description",
            "A tiny qwen35 model with an MTP head, trained by MTP Studio's training pipeline on "
            f"the Python {meta['python_version']} standard library (PSF-2.0) and hand-written chat (MIT).",
        ),
    )
    return export(model, vocab, gguf, name=name, dtype=dtype, extra_kv=extra)  # type: ignore[arg-type]


def parity(out: Path, gguf: Path, model=None):
    from training.parity import check
    from training.train import load_trained

    if model is None:
        model, _ = load_trained(out)
    return check(model, tk.load(out / "tokenizer.json"), gguf, PARITY_TEXT)


def _cpu_name() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ship(out: Path, dest: Path, *, dtype: str = "q8_0") -> dict:
    """Export the finished model to ``dest`` (the bundled demo), check an F32 export's
    parity with llama.cpp first, and write ``dest``'s provenance manifest beside it
    (``demo.json``: digest, how it was made, held-out figures)."""
    import hashlib
    import platform

    import tokenizers
    import torch

    from training.train import evaluate

    model, state = load_finished(out)
    f32 = export_gguf(out, out / "model-f32.gguf", dtype="f32", model=model)
    report = parity(out, f32, model)
    if not report.ok:
        raise SystemExit(f"parity with llama.cpp failed, not shipping: {json.dumps(report.to_json())}")
    export_gguf(out, dest, dtype=dtype, model=model)
    cfg = TrainConfig(**state["train_config"])
    held = evaluate(model, data.eval_windows(np.load(out / "held_out.npy"), cfg.seq_len, 10**6))
    manifest = {
        "file": dest.name,
        "sha256": hashlib.sha256(dest.read_bytes()).hexdigest(),
        "bytes": dest.stat().st_size,
        "weights": dtype,
        "parameters": count_parameters(model),
        "model": state["model_config"],
        "training": {
            "train_config": state["train_config"],
            "steps": state["step"],
            "seconds": round(state["elapsed"]),
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "threads": 1,
            "cpu": _cpu_name(),
            "machine": platform.machine(),
        },
        "corpus": json.loads((out / "corpus.json").read_text()),
        "held_out": {k: round(v, 4) for k, v in held.items()},
        "parity_f32": report.to_json(),
        "retrain": "pip install -e '.[train]' && python -m training all --out build/train-demo && "
        f"python -m training ship --out build/train-demo --gguf {dest}",
    }
    data.save_json(dest.with_suffix(".json"), manifest)
    return manifest
