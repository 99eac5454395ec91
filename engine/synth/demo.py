"""The bundled demo model and its constructed stand-in.

``resources/demo.gguf`` is a *trained* qwen35 model with an MTP head, made by the training
pipeline in ``training/`` (``python -m training all --out DIR``, then ``export --gguf``);
``resources/demo.json`` records how (corpus digest, torch version, steps, figures) and the
file's SHA-256, which a test checks.

The constructed demo (:data:`CONSTRUCTED_DEMO_SPEC`) answers every chat with one fixed
sentence and drafts most of it correctly. It was the bundled model before the trained one
and stays as a test fixture: its output is known in advance.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.synth.qwen35 import Qwen35Spec, build_model

SENTENCE = (
    "Hi",
    "!",
    " I",
    " am",
    " MTP",
    " Studio",
    "'s",
    " demo",
    " model",
    ",",
    " a",
    " tiny",
    " constructed",
    " network",
    " that",
    " shows",
    " speculative",
    " decoding",
    " live",
    ".",
    " Load",
    " models",
    " from",
    " Hugging",
    " Face",
    " on",
    " the",
    " Models",
    " page",
    " to",
    " chat",
    " for",
    " real",
)

CONSTRUCTED_DEMO_SPEC = Qwen35Spec(
    name="MTP Studio constructed demo (not a language model)",
    weights="constructed",
    seed=2026,
    dtype="f16",
    sentence=SENTENCE,
    draft_sentence_misses=(6, 13, 21, 28),
    n_merges=420,
    n_ctx_train=8192,
)


def resources_dir() -> Path:
    """``resources/`` of a source checkout, or the frozen app's bundled copy."""
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen) / "resources"
    return Path(__file__).resolve().parents[2] / "resources"


def demo_model_path() -> Path:
    return resources_dir() / "demo.gguf"


def demo_manifest_path() -> Path:
    return resources_dir() / "demo.json"


def build_constructed_demo(path: Path) -> None:
    build_model(CONSTRUCTED_DEMO_SPEC, path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m engine.synth.demo OUT.gguf   (the constructed demo; the bundled one is trained)")
    build_constructed_demo(Path(sys.argv[1]))
