"""Recipes of the tiny qwen35 models the tests build (deterministically) with gguf-py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.synth.demo import CONSTRUCTED_DEMO_SPEC
from engine.synth.qwen35 import BuiltModel, Qwen35Spec, build_model

RECIPES: dict[str, Qwen35Spec] = {
    # random weights: the target depends on its whole history, drafts are ~never accepted
    "random": Qwen35Spec(name="fixture random", weights="random", seed=11),
    # constructed: the draft map equals the target map -> 100% acceptance
    "full": Qwen35Spec(name="fixture full acceptance", weights="constructed", seed=12),
    # constructed + history-dependent noise + a draft map agreeing on ~70% of tokens at
    # random: partial acceptance with every accepted length
    "partial": Qwen35Spec(
        name="fixture partial acceptance",
        weights="constructed",
        seed=13,
        draft_agreement=0.7,
        draft_pattern="random",
        trunk_noise=2.0,
    ),
    # constructed, with a chain that ends in <|im_end|>: end-of-generation stops
    "eos": Qwen35Spec(name="fixture eos", weights="constructed", seed=14, end_chain_at=60),
    # the bundled demo before the trained one: answers every chat with one known sentence
    "constructed-demo": CONSTRUCTED_DEMO_SPEC,
}


@dataclass(frozen=True)
class Fixture:
    name: str
    built: BuiltModel

    @property
    def path(self) -> Path:
        return self.built.integrated

    @property
    def trunk(self) -> Path:
        assert self.built.trunk is not None
        return self.built.trunk

    @property
    def head(self) -> Path:
        assert self.built.head is not None
        return self.built.head


def build_fixture(name: str, folder: Path, spec: Qwen35Spec | None = None) -> Fixture:
    spec = spec or RECIPES[name]
    folder.mkdir(parents=True, exist_ok=True)
    built = build_model(
        spec,
        folder / f"{name}.gguf",
        trunk_path=folder / f"{name}-trunk.gguf",
        head_path=folder / f"mtp-{name}.gguf",
    )
    return Fixture(name, built)
