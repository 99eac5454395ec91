"""Where a request meets its defaults: the one step between a job and a decode.

Every entry point (HTTP endpoint, chat page, CLI, benchmarks) builds a
:class:`~engine.runtime.jobs.Generate` that says only what the user asked for; a value
left out is ``None``. Two steps turn it into a decode, both here:

* :func:`resolve` (no model needed) fills each value left out from the defaults, in
  layers — the job's own, then the submitter's (``Generate.defaults``: the endpoint's
  settings, the chat page's preferences), then the engine's (:data:`INTERACTIVE` for the app, ``serve`` and
  ``generate``), then :data:`BUILTIN` — and checks every value with
  :mod:`engine.runtime.limits`, the one place ranges are written (an API checks only the
  JSON types of its fields, and that a field it requires is there). It also normalizes the
  conversation (tool calls' arguments, tool results) and decides ``tool_choice``. A
  resolved job is complete and marked so: the endpoint resolves before it queues a job
  (a bad value is its 400 at once) and nothing resolves it again — not the engine thread,
  not the worker process a model pooled over RPC runs in, which therefore runs exactly
  what a local one would.
* :func:`prepare` meets the model: has the conversation rendered
  (:mod:`engine.runtime.prompt.render`, with the tools, the template's own arguments and
  what the reply is split by) and tokenizes it (reusing the conversation's tokens), takes
  the model's limits (its end tokens, its deepest draft), gives one grammar for the whole
  reply (:mod:`engine.runtime.prompt.replygrammar`) and the depth policy
  (:func:`engine.runtime.decode.policy.store.depth_policy`), giving :class:`Prepared`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from engine.errors import InvalidRequestError
from engine.runtime import limits
from engine.runtime.decode.depth import AUTO, DraftDepth, Mtp
from engine.runtime.decode.grammar import Constraint, GrammarSpec, compile_grammar
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.penalties import Penalties
from engine.runtime.decode.policy.store import depth_policy
from engine.runtime.decode.sampling import SamplingParams
from engine.runtime.jobs import Defaults, Generate
from engine.runtime.llama.model import Model
from engine.runtime.media.marking import has_media, mark, unmark
from engine.runtime.media.projector import MediaPrompt
from engine.runtime.llama.vocab import grammar_literal, grammar_tokenizer, shown_markers
from engine.runtime.load.loader import LoadedModel, MtpSource
from engine.runtime.prompt import cachepoints
from engine.runtime.prompt.chat import template_kwargs
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.render import RenderedChat, ReplyPlan, render_chat
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.prompt.tools import ToolChoice, check_tool_schemas, normalize_messages

_OFF = SamplingParams()  # the decoder's neutral values: greedy, no top-p/top-k cut
_NO_PENALTY = Penalties()

#: The one table of built-in values: what a request gets when no layer sets one (plain
#: greedy, MTP on at depth 1, no penalties, thinking unlimited and split from the content,
#: tool calls several to a reply). Every caller passes only what its user set — as the
#: job's own values or as a layer of :class:`Defaults`.
BUILTIN = Defaults(
    max_tokens=256,
    temperature=_OFF.temperature,
    top_p=_OFF.top_p,
    top_k=_OFF.top_k,
    mtp=Mtp.ON,
    draft_depth=DraftDepth(1),
    sampled_draft=False,
    suffix_drafts=False,
    presence_penalty=_NO_PENALTY.presence,
    frequency_penalty=_NO_PENALTY.frequency,
    repeat_penalty=_NO_PENALTY.repeat,
    thinking_budget=None,
    reasoning_format="auto",
    parallel_tool_calls=True,
)
#: The engine layer of what people use — the app (its chat page and endpoint), ``serve``
#: and ``generate``: auto depth, drafts from the conversation beside the head's
#: (docs/agent-speed.md: never taken where they are expected to earn less), and replies
#: long enough for a chat answer. Library callers, benchmarks and tests that make an
#: Engine of their own get :data:`BUILTIN`.
INTERACTIVE = Defaults(max_tokens=1024, draft_depth=AUTO, suffix_drafts=True)

_DEFAULTED = tuple(f.name for f in fields(Defaults))


def resolve(job: Generate, engine_defaults: Defaults | None = None) -> Generate:
    """``job`` with every value decided and checked, marked resolved (a resolved job is
    returned as it is). Raises :class:`InvalidRequestError` naming the field at fault.
    Needs no model; any thread (an endpoint resolves on its own before it queues)."""
    if job.resolved:
        return job
    values = _layered(job, engine_defaults)
    if job.grammar is not None:
        compile_grammar(job.grammar)  # a grammar that cannot be used is refused before the job runs
    if job.tools:
        check_tool_schemas(job.tools)
    template_kwargs(job.chat_template_kwargs)
    budget = values["thinking_budget"]
    return replace(
        job,
        messages=None if job.messages is None else normalize_messages(job.messages),
        max_tokens=limits.check_max_tokens(values["max_tokens"]),
        temperature=limits.check_temperature(values["temperature"]),
        top_p=limits.check_top_p(values["top_p"]),
        top_k=limits.check_top_k(values["top_k"]),
        seed=limits.check_seed(job.seed),
        stop=limits.check_stop(job.stop),
        mtp=_mtp(values["mtp"]),
        draft_depth=_depth(values["draft_depth"]),
        sampled_draft=limits.check_flag("sampled_draft", values["sampled_draft"]),
        suffix_drafts=limits.check_flag("suffix_drafts", values["suffix_drafts"]),
        presence_penalty=limits.check_penalty("presence_penalty", values["presence_penalty"]),
        frequency_penalty=limits.check_penalty("frequency_penalty", values["frequency_penalty"]),
        repeat_penalty=limits.check_repeat_penalty(values["repeat_penalty"]),
        logprobs=None if job.logprobs is None else limits.check_top_logprobs(job.logprobs),
        thinking_budget=None if budget is None else limits.check_thinking_budget(budget),
        reasoning_format=limits.check_reasoning_format(values["reasoning_format"]),
        parallel_tool_calls=limits.check_flag("parallel_tool_calls", values["parallel_tool_calls"]),
        # offered tools may be called unless the request says otherwise
        tool_choice=job.tool_choice or ToolChoice("auto" if job.tools else "none"),
        defaults=None,
        resolved=True,
    )


def _layered(job: Generate, engine_defaults: Defaults | None) -> dict[str, object]:
    """Each defaulted value from the first layer that sets it: the job's own, the
    submitter's (``job.defaults``), the engine's, :data:`BUILTIN`."""
    layers = BUILTIN if engine_defaults is None else engine_defaults.over(BUILTIN)
    if job.defaults is not None:
        layers = job.defaults.over(layers)
    own = {name: getattr(job, name) for name in _DEFAULTED}
    return {name: getattr(layers, name) if v is None else v for name, v in own.items()}


def _mtp(value: object) -> Mtp:
    try:
        return Mtp(value)
    except ValueError:
        raise InvalidRequestError(f"mtp must be 'on' or 'off', got {value!r}", param="mtp") from None


def _depth(value: object) -> DraftDepth:
    try:
        return DraftDepth.parse(value)
    except InvalidRequestError as e:
        raise InvalidRequestError(str(e), param="draft_depth") from None


@dataclass
class Prepared:
    """A resolved job met with its model: what the decode loop runs."""

    prompt: list[int]
    #: the rendered prompt text (None for token-id prompts): the conversation cache's key
    prompt_text: str | None
    params: DecodeParams
    #: how the reply is split (chat replies only)
    reply: ReplyPlan | None = None

    @property
    def learns(self) -> bool:
        """The depth policy is auto's, which learns and is saved after the run."""
        return getattr(self.params.depth, "learns", False)


def prepare(job: Generate, lm: LoadedModel, texts: TokenizedTexts, *, encode: bool = True) -> Prepared:
    """The prompt tokens and decode parameters of a resolved ``job`` on ``lm``
    (``texts``: the model's recent conversations, whose tokens are reused; ``encode``
    False: a prompt's pictures are counted, not encoded — for counting only). Runs where
    the job is prepared: the engine thread, or a request's own thread for a model with slots."""
    assert job.resolved, "prepare takes a resolved job (engine.runtime.decider.resolve)"
    model = lm.model
    snapshots = lm.snapshots is not None and lm.snapshots.snapshots_in_prefill(model.restores_cut_back)
    chat: RenderedChat | None = None
    text: str | None = None
    media: MediaPrompt | None = None
    if job.messages is not None and has_media(job.messages):
        # a prompt with pictures is not remembered as text: its tokens depend on them
        chat, media = _render_media(job, lm, encode)
        prompt = model.with_bos(media.tokens)
        # the next turn shares this prompt up to its end (whatever reply it carries back):
        # a snapshot there lets it resume after the picture where the contexts cannot
        # roll back (recurrent layers)
        points = (len(prompt) - 1,) if snapshots else ()
    elif job.messages is not None:
        chat = _render(job, lm, points=snapshots)
        text = chat.text
        prompt, points = _tokenize(text, model, texts, chat.offsets)
    elif isinstance(job.prompt, str):
        text = job.prompt
        prompt, _ = _tokenize(text, model, texts)
        # a completion sent again (a retry, another sample) resumes one token before its end
        points = (len(prompt) - 1,) if snapshots else ()
    elif isinstance(job.prompt, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < model.n_vocab for t in job.prompt):
            raise InvalidRequestError(f"prompt token ids must be integers in [0, {model.n_vocab})", param="prompt")
        prompt, points = list(job.prompt), ()
    else:
        raise InvalidRequestError("give either a prompt or messages", param="prompt")
    if not prompt:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    assert job.max_tokens is not None and job.temperature is not None and job.top_p is not None
    assert job.top_k is not None and isinstance(job.draft_depth, DraftDepth)
    assert job.presence_penalty is not None and job.frequency_penalty is not None and job.repeat_penalty is not None
    template = lm.template
    end_tokens, end_strings = (template.end_tokens, template.end_strings) if chat is not None else (frozenset(), ())
    grammar = _reply_grammar(job, model, chat) if chat is not None else job.grammar
    speculate = job.mtp is Mtp.ON and lm.source != MtpSource.OFF
    params = DecodeParams(
        max_tokens=job.max_tokens,
        stop=(*job.stop, *end_strings),
        end_tokens=end_tokens,
        sampling=SamplingParams(job.temperature, job.top_p, job.top_k, job.seed),
        sampled_draft=bool(job.sampled_draft),
        suffix_drafts=bool(job.suffix_drafts),
        depth=depth_policy(lm, job.draft_depth) if speculate else None,
        ignore_eog=job.ignore_eog,
        constraint=_constraint(grammar, model, end_tokens) if grammar is not None else None,
        logprobs=job.logprobs,
        penalties=Penalties(job.presence_penalty, job.frequency_penalty, job.repeat_penalty),
        shown_tokens=_shown_tokens(model, chat, template.thinking) if chat is not None else frozenset(),
        cache_points=points,
        media=media.chunks if media is not None else None,
    )
    return Prepared(prompt, text, params, chat.plan if chat is not None else None)


def _render_media(job: Generate, lm: LoadedModel, encode: bool) -> tuple[RenderedChat, MediaPrompt]:
    """A conversation with pictures: rendered with a placeholder where each stands, then
    tokenized and its pictures encoded by the model's projector (any thread)."""
    if lm.projector is None:
        raise InvalidRequestError(no_projector(lm.name), param="messages")
    messages, media = mark(job.messages or [])
    chat = _render(replace(job, messages=messages), lm, points=False)
    text, ordered = unmark(chat.text, media)
    return chat, lm.projector.prompt(text, ordered, encode=encode)


def no_projector(model: str) -> str:
    """The refusal of a picture sent to a model loaded without a projector."""
    return (
        f"{model} was loaded without a projector, so it cannot see images or hear audio: download the model's "
        "projector (its mmproj-*.gguf file: Download with vision in the app, or mtp-studio pull REPO --mmproj) "
        "and load the model with it (mtp-studio serve --mmproj FILE)"
    )


def _render(job: Generate, lm: LoadedModel, *, points: bool) -> RenderedChat:
    """The job's conversation rendered by the model's template, as the job decided."""
    assert job.messages is not None and job.tool_choice is not None  # resolved: normalized
    return render_chat(
        lm.template,
        lm.model,
        job.messages,
        tools=job.tools,
        choice=job.tool_choice,
        extra=job.chat_template_kwargs,
        split_thinking=job.reasoning_format != "none",
        points=points,
    )


def _tokenize(
    text: str, model: Model, texts: TokenizedTexts, offsets: tuple[int, ...] = ()
) -> tuple[list[int], tuple[int, ...]]:
    """``text`` as prompt tokens (the earlier turns' tokens reused; a BOS added unless the
    text writes one), and the prompt positions of the text ``offsets``."""
    body = texts.tokenize(text, model.tokenize)
    prompt = model.with_bos(body)
    if not offsets:
        return prompt, ()
    return prompt, cachepoints.token_points(list(offsets), text, prompt, model.tokenize, len(prompt) - len(body))


def _reply_grammar(job: Generate, model: Model, chat: RenderedChat) -> GrammarSpec | None:
    """One grammar for the whole chat reply: its thinking (and budget), the answer's own
    grammar, and the tool calls it may hold (None: nothing to constrain)."""
    return reply_grammar(
        lit=grammar_literal(model),
        thinking=chat.thinking,
        budget=job.thinking_budget,
        answer=job.grammar,
        fmt=chat.plan.fmt,
        tools=job.tools,
        choice=job.tool_choice,
        parallel=bool(job.parallel_tool_calls),
        may_open=chat.may_open,
    )


def _shown_tokens(model: Model, chat: RenderedChat, thinking: Thinking | None) -> frozenset[int]:
    """The control tokens of the markers a chat reply is parsed by (its call format's, the
    template's thinking ones, which the model may write even where the prompt opened no
    block): shown as their text so the parser sees them."""
    fmt = chat.plan.fmt
    markers = (
        *(fmt.markers if fmt is not None else ()),
        *((thinking.start, thinking.end, *thinking.answer_headers, *thinking.answer_markers) if thinking else ()),
    )
    return shown_markers(model, markers) if markers else frozenset()


def _constraint(spec: GrammarSpec, model: Model, end_tokens: frozenset[int]) -> Constraint:
    """A fresh matcher for one generation, over the model's vocabulary as llguidance sees
    it (built once per model and set of end tokens)."""
    return Constraint(grammar_tokenizer(model, end_tokens), compile_grammar(spec), model.n_vocab)
