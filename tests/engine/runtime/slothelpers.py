"""What the slot tests share: prompts, what concurrent requests ask for, and an engine with a
model loaded with N slots."""

from __future__ import annotations

from pathlib import Path

from engine.runtime import jobs as J
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec

PROMPTS = [
    "Hello there, how are you today?",
    "The quick brown fox jumps over",
    "Once upon a time in a land far away",
    "Numbers: one two three four five",
    "A list of colours: red, green,",
    "Dear friend, I write to you",
]

#: what each of several concurrent requests asks for: MTP auto, off, a fixed depth,
#: seeded sampling, penalties and a grammar
ASKS = [
    dict(draft_depth="auto"),
    dict(mtp=J.Mtp.OFF),
    dict(draft_depth=2),
    dict(temperature=0.9, top_k=40, seed=7, draft_depth=2),
    dict(repeat_penalty=1.3, frequency_penalty=0.4, draft_depth="auto"),
    dict(grammar=None, draft_depth=3),
]


def engine_with(path: Path, parallel: int, **defaults) -> Engine:
    e = Engine(EngineConfig(**defaults)).start()
    e.submit(J.LoadModel(LoadSpec(path, n_ctx=512, probe=False, fit="off", parallel=parallel))).result()
    return e


def job(i: int, max_tokens: int = 32, **kw) -> J.Generate:
    ask = dict(ASKS[i % len(ASKS)])
    if "grammar" in ask:  # the output must follow a grammar (its forced tokens ride along)
        ask["grammar"] = GrammarSpec("regex", r"(the |a |an )?[a-z]{2,12}( [a-z]{2,12}){2,30}")
    return J.Generate(prompt=PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens, ignore_eog=True, **{**ask, **kw})


def alone(path: Path, jobs: list[J.Generate]) -> list[list[int]]:
    with engine_with(path, 1) as e:
        return [e.submit(j).result().tokens for j in jobs]
