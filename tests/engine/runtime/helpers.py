"""Small helpers for runtime tests: load fixture models, run generations."""

from __future__ import annotations

from engine.runtime.decode.loop import Decoded, generate
from engine.runtime.decode.params import DecodeParams

from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.load.loader import LoadedModel, LoadSpec, MtpSource, load

PROMPTS = (
    "Hello! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "One two three four",
    "What is the weather like?",
    "MTP",
)


def load_fixture(fx, source: str, *, max_depth: int = 4, n_ctx: int = 1024, **kw) -> LoadedModel:
    if source == "external":
        return load(
            LoadSpec(fx.trunk, head=fx.head, mtp=MtpSource.EXTERNAL, n_ctx=n_ctx, max_draft_depth=max_depth, **kw)
        )
    if source == "trunk":
        return load(LoadSpec(fx.trunk, mtp=MtpSource.OFF, n_ctx=n_ctx, **kw))
    return load(LoadSpec(fx.path, mtp=MtpSource(source), n_ctx=n_ctx, max_draft_depth=max_depth, **kw))


def run(lm: LoadedModel, prompt, depth: int | None, max_tokens: int = 48, **kw) -> Decoded:
    tokens = lm.model.tokenize(prompt) if isinstance(prompt, str) else prompt
    params = DecodeParams(max_tokens=max_tokens, depth=FixedDepth(depth) if depth else None, **kw)
    return generate(lm.session, tokens, params)
