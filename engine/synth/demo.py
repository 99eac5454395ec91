"""The bundled demo model (``resources/demo.gguf``): a constructed qwen35 model that
answers every chat with one sentence, with an integrated MTP head that drafts most of
it correctly — enough to see speculative decoding work with nothing downloaded.

Regenerate with ``python -m engine.synth.demo resources/demo.gguf``; a test checks the
committed file is byte-identical to what this module builds.
"""

from __future__ import annotations

import sys
from pathlib import Path

from engine.synth.qwen35 import Qwen35Spec, build_model

SENTENCE = (
    "Hi", "!", " I", " am", " MTP", " Studio", "'s", " demo", " model", ",", " a", " tiny", " constructed",
    " network", " that", " shows", " speculative", " decoding", " live", ".", " Load", " models", " from",
    " Hugging", " Face", " on", " the", " Models", " page", " to", " chat", " for", " real",
)  # fmt: skip

DEMO_SPEC = Qwen35Spec(
    name="MTP Studio demo (constructed, not a language model)",
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


def build_demo(path: Path) -> None:
    build_model(DEMO_SPEC, path)


if __name__ == "__main__":
    build_demo(Path(sys.argv[1] if len(sys.argv) > 1 else demo_model_path()))
