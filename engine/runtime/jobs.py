"""The jobs the engine thread runs, and the events it sends back.

Jobs are plain data; the engine dispatches them through a registry keyed by type.
Events are immutable and cheap; a job's event stream always ends with exactly one
:class:`Done` (including after a cancel, which is not an error) or :class:`Failed`.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from engine.runtime.decode.depth import DraftDepth, Mtp
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.decode.logprobs import TokenLogprob
from engine.runtime.decode.stats import GenerationStats, RoundStats
from engine.runtime.decode.stopping import StopReason
from engine.runtime.load.loader import LoadSpec
from engine.runtime.prompt.reply import Part, Reply, joined_parts
from engine.runtime.prompt.tools import Tool, ToolChoice


# ------------------------------------------------------------------------- jobs
@dataclass(frozen=True)
class LoadModel:
    spec: LoadSpec
    #: replace every loaded model (the desktop app runs one at a time)
    replace: bool = True


@dataclass(frozen=True)
class UnloadModel:
    name: str | None = None  # None: all


@dataclass(frozen=True)
class Defaults:
    """Values for what a :class:`Generate` leaves out; ``None`` here means "not set in
    this layer". Layers stack with :meth:`over` (engine.runtime.decider)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    mtp: Mtp | None = None
    draft_depth: DraftDepth | int | str | None = None
    sampled_draft: bool | None = None
    #: also draft from the conversation itself (engine.runtime.decode.drafting.suffix)
    suffix_drafts: bool | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    #: most tokens a reply may think before its think block is closed for it
    thinking_budget: int | None = None
    #: where a thinking model's thinking goes: "auto" (apart from the content) or "none"
    #: (left in it); engine.runtime.limits.REASONING_FORMATS
    reasoning_format: str | None = None
    #: whether one reply may hold several tool calls
    parallel_tool_calls: bool | None = None

    def over(self, base: Defaults) -> Defaults:
        """This layer on top of ``base``: its values where set, ``base``'s elsewhere."""
        mine = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(base, **{k: v for k, v in mine.items() if v is not None})


@dataclass(frozen=True)
class Generate:
    """Generate from a prompt (text or token ids) or from chat messages.

    A value left ``None`` takes its default when the engine resolves the job
    (:func:`engine.runtime.decider.resolve`): the submitter's ``defaults``, then the
    engine's, then the built-in ones."""

    model: str | None = None  # None: the only / first loaded model
    prompt: str | list[int] | None = None
    messages: list[dict] | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    #: ON: speculate with the model's MTP source (if it has one); OFF: plain decoding
    mtp: Mtp | None = None
    #: while sampling, draft by sampling the MTP head (rejection sampling; exact in
    #: distribution, not seed-for-seed equal to plain sampling)
    sampled_draft: bool | None = None
    #: each round, also consider the continuation of the longest earlier match in the
    #: prompt and output as the draft (engine.runtime.decode.drafting.suffix)
    suffix_drafts: bool | None = None
    #: draft depth K >= 1, or "auto" (adaptive), parsed by DraftDepth.parse
    draft_depth: DraftDepth | int | str | None = None
    ignore_eog: bool = False
    #: a grammar the output must follow (JSON schema, any JSON object, Lark/GBNF, regex)
    grammar: GrammarSpec | None = None
    #: report each token's log-probability and this many alternatives (0-20); None: off
    logprobs: int | None = None
    #: repetition penalties over the generated tokens (decode.penalties); None: none
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    #: tools the model may call (chat only), which of them (None: auto with tools), and
    #: whether one reply may hold several calls (None: the defaults'; yes unless set)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    #: extra values for the chat template (e.g. ``{"enable_thinking": False}``)
    chat_template_kwargs: dict | None = field(default=None, compare=False)
    #: "auto": a thinking model's thinking is split from its content; "none": left in it
    #: ("deepseek", llama-server's name for the split, resolves to "auto"); None: the
    #: defaults' ("auto" unless set)
    reasoning_format: str | None = None
    #: most tokens the reply may think (None: the defaults'; unlimited unless set)
    thinking_budget: int | None = None
    #: deliver per-round :class:`Round` events to the submitter (observers always get
    #: them); off for clients that only want text, such as the HTTP endpoint
    rounds: bool = True
    #: the submitter's defaults for values left None (the endpoint's settings)
    defaults: Defaults | None = field(default=None, compare=False)
    #: test seam: called on the engine thread at every cancellation point
    phase_hook: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    #: every value is decided and checked (:func:`engine.runtime.decider.resolve` sets it;
    #: the engine does not resolve such a job again)
    resolved: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Call:
    """Run ``fn(engine_state)`` on the engine thread (bench, tests, tools that need a
    loaded model). ``fn`` gets the :class:`~engine.runtime.engine.EngineState`, the
    cancel event and an ``emit`` function for progress events.

    ``access`` is what ``fn`` needs: ``"exclusive"`` (the default) has the models to
    itself, after every running generation has ended — or with ``model`` set, that one
    model, after its own generations have ended, while every other model's go on (the
    A/B bench on one model; ``fn`` then runs as one of that model's sequences when it has
    slots, else between the others' steps); ``"read"`` only reads them — renders,
    tokenizes, reads a model's facts, never decodes nor loads — and runs between the
    running generations' steps, so a count does not wait for every stream to end."""

    fn: Callable[[Any, threading.Event, Callable[[Event], None]], Any]
    label: str = "call"
    access: str = "exclusive"
    #: with ``access="exclusive"``: the one model ``fn`` needs to itself (None: every model)
    model: str | None = None

    def __post_init__(self) -> None:
        if self.access not in CALL_ACCESS:
            raise ValueError(f"access must be one of {', '.join(CALL_ACCESS)}, got {self.access!r}")


#: what a Call may need of the loaded models
CALL_ACCESS = ("exclusive", "read")


# ----------------------------------------------------------------------- events
@dataclass(frozen=True)
class Started:
    job_id: int


@dataclass(frozen=True)
class Progress:
    fraction: float  # 0..1, or -1 when unknown
    message: str = ""


@dataclass(frozen=True)
class Tokens:
    tokens: tuple[int, ...]
    text: str
    #: per token, when the job asked for log-probabilities (decode.logprobs.TokenLogprob)
    logprobs: tuple[TokenLogprob, ...] | None = None
    #: the text split into thinking, content and tool calls (prompt.reply), when the
    #: reply is split (a thinking template, or tools)
    parts: tuple[Part, ...] | None = None

    def then(self, nxt: Tokens) -> Tokens | None:
        """This event and the ``nxt`` one as one (a reader that is behind writes them in
        one chunk), or None when they cannot be one (log-probabilities or a split in
        one only)."""
        if (self.logprobs is None) != (nxt.logprobs is None) or (self.parts is None) != (nxt.parts is None):
            return None
        return Tokens(
            self.tokens + nxt.tokens,
            self.text + nxt.text,
            None if self.logprobs is None else self.logprobs + nxt.logprobs,  # type: ignore[operator]
            None if self.parts is None else joined_parts(self.parts, nxt.parts),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Round:
    stats: RoundStats


@dataclass(frozen=True)
class Done:
    result: Any = None
    cancelled: bool = False


@dataclass(frozen=True)
class Failed:
    error: BaseException
    code: str
    message: str


class Ending(enum.StrEnum):
    """How a reply ended, the one rule every API words its own way: its calls when it
    made whole ones (and was not cut inside another); else cut short (by its length, a
    full context or a cancel); else a stop string or the model's end of turn. A reply cut
    inside a call is cut short, whatever calls came before: no client may run a call that
    was never finished."""

    END_TURN = "end_turn"
    STOP_STRING = "stop_string"
    TOOL_CALLS = "tool_calls"
    CUT = "cut"


@dataclass(frozen=True)
class GenerateResult:
    tokens: list[int]
    text: str
    stats: GenerationStats
    model: str
    prompt_tokens: int
    #: per token, when the job asked for them
    logprobs: list[TokenLogprob] | None = None
    #: the reply split into thinking, content and tool calls (None: not split)
    reply: Reply | None = None

    @property
    def stop_reason(self) -> StopReason | None:
        return self.stats.stop_reason

    @property
    def ending(self) -> Ending:
        """How the reply ended (:class:`Ending`)."""
        stop, reply = self.stats.stop_reason, self.reply
        cut = stop is None or stop.finish_reason == "length"
        if reply is not None and reply.calls and not (cut and reply.unfinished):
            return Ending.TOOL_CALLS
        if cut:
            return Ending.CUT
        return Ending.STOP_STRING if stop is StopReason.STOP_STRING else Ending.END_TURN

    @property
    def finish_reason(self) -> str:
        """OpenAI's finish reason ("stop", "length" or "tool_calls")."""
        return _FINISH_REASONS[self.ending]

    def to_json(self) -> dict:
        s = self.stats
        return {
            "tokens": self.tokens,
            "text": self.text,
            "stats": {
                "mtp": s.mtp,
                "draft_depth": s.depth_json,
                "drafted": s.drafted,
                "accepted": s.accepted,
                "acceptance": s.acceptance,
                "mean_accept_len": s.mean_accept_len,
                "target_forwards": s.target_forwards,
                "tokens_per_second": s.tokens_per_second,
                "prompt_tokens": s.prompt_tokens,
                "prompt_tokens_reused": s.prompt_tokens_reused,
                "generated": s.generated,
                "rollback_repairs": s.rollback_repairs,
                "rollback_replays": s.rollback_replays,
                "suffix_rounds": s.suffix_rounds,
                "suffix_drafted": s.suffix_drafted,
                "suffix_accepted": s.suffix_accepted,
                "acceptance_by_position": s.acceptance_by_position,
                "stop_reason": s.stop_reason,
                "sampled": s.sampled,
                "sampled_draft": s.sampled_draft,
                "forced": s.forced,
                "seed": s.seed,
            },
        }


#: everything the engine thread runs
@dataclass(frozen=True)
class Embed:
    """Pooled vectors of ``inputs`` (texts, or token ids) on an embedding model
    (engine.runtime.pooled); ``truncate`` cuts an input to what one decode takes instead of
    refusing it."""

    model: str | None
    inputs: tuple[str | tuple[int, ...], ...]
    truncate: bool = True
    normalize: bool = True


@dataclass(frozen=True)
class Rerank:
    """Relevance scores of ``documents`` to ``query`` on a reranking model."""

    model: str | None
    query: str
    documents: tuple[str, ...]
    truncate: bool = True


@dataclass(frozen=True)
class PooledResult:
    """One vector per input (embeddings), or one score per document (rerank, in input
    order), and the tokens decoded."""

    vectors: list = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    tokens: int = 0
    ms: float = 0.0


Job = LoadModel | UnloadModel | Generate | Call | Embed | Rerank
#: everything a job reports, in order: Started, then Progress/Tokens/Round, then Done or Failed
Event = Started | Progress | Tokens | Round | Done | Failed


#: OpenAI's words for how a reply ended (chat, completions)
_FINISH_REASONS = {
    Ending.END_TURN: "stop",
    Ending.STOP_STRING: "stop",
    Ending.TOOL_CALLS: "tool_calls",
    Ending.CUT: "length",
}
