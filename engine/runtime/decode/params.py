"""What one generation is told: the decode loop's parameters, every one decided before
the loop runs (:func:`engine.runtime.decider.prepare` makes them from a resolved job).

The defaults here are the decoder's neutral values — no stop strings, plain decoding,
no grammar, no penalties — not policy: what a request gets when it says nothing is
decided in one table, :data:`engine.runtime.decider.BUILTIN`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.runtime.decode.grammar import Constraint
from engine.runtime.decode.penalties import Penalties
from engine.runtime.decode.policy.base import DepthPolicy
from engine.runtime.decode.sampling import SamplingParams


@dataclass
class DecodeParams:
    max_tokens: int
    stop: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: None: plain decoding; a policy: MTP speculation (greedy or sampled)
    depth: DepthPolicy | None = None
    #: while sampling: draft by sampling the MTP head and accept by rejection sampling
    #: (exact in distribution; not token-for-token equal to plain sampling with the same
    #: seed). Off: argmax drafts accepted while the sampled target token equals them.
    sampled_draft: bool = False
    #: each round take the suffix draft (the continuation of the longest earlier match in
    #: the prompt and output) instead of the MTP chain when it pays more (argmax drafts only)
    suffix_drafts: bool = False
    ignore_eog: bool = False
    #: tokens that end the reply like end-of-generation (a chat template's turn markers)
    end_tokens: frozenset[int] = frozenset()
    #: a grammar the output must follow (fresh per generation: it holds the matcher state)
    constraint: Constraint | None = None
    #: repetition penalties, by the tokens generated before each position
    penalties: Penalties = field(default_factory=Penalties)
    #: report each token's log-probability and this many alternatives (0-20); None: off
    logprobs: int | None = None
    #: control tokens shown as their text (a tool-call format's markers, which the reply
    #: parser must see; control tokens otherwise render as nothing)
    shown_tokens: frozenset[int] = frozenset()
    #: prompt positions worth a prompt-cache snapshot (a chat prompt's message boundaries)
    cache_points: tuple[int, ...] = ()
    #: the media chunks of a prompt with pictures, by the negative id their rows hold
    #: (engine.runtime.media.projector.MediaPrompt.chunks); None: a prompt of tokens only
    media: dict | None = None
