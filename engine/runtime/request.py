"""Where a request meets its defaults: the one step between a job and a decode.

Every entry point (HTTP endpoint, chat page, CLI, benchmarks) builds a
:class:`~engine.runtime.jobs.Generate` that says only what the user asked for; a value
left out is ``None``. Two steps turn it into a decode, both here:

* :func:`resolve` (no model needed) fills each value left out from the defaults, in
  layers — the job's own, then the submitter's (``Generate.defaults``: the endpoint's
  settings), then the engine's (:data:`INTERACTIVE` for the app, ``serve`` and
  ``generate``), then :data:`BUILTIN` — and checks every value with
  :mod:`engine.runtime.limits`, the one place ranges are written. It also normalizes the
  conversation (tool calls' arguments, tool results) and decides ``tool_choice``. A
  resolved job is complete and marked so: the endpoint resolves before it queues a job
  (a bad value is its 400 at once) and nothing resolves it again — not the engine thread,
  not the worker process a model pooled over RPC runs in, which therefore runs exactly
  what a local one would.
* :func:`prepare` meets the model: renders and tokenizes the prompt (reusing the
  conversation's tokens), takes the model's limits (its end tokens, its deepest draft)
  and chooses the draft source and depth policy, giving :class:`Prepared`.

Tools and reasoning hook in here: :func:`prepare` renders the tools and the template's
own arguments with what was found of the template when the model loaded (its call format
and thinking markers: ``ChatTemplate.calls``/``thinking``), reads whether the reply
starts thinking from the rendered prompt, and gives one grammar for the whole reply
(:mod:`engine.runtime.prompt.replygrammar`) and the plan the reply is split by
(:class:`ReplyPlan`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from engine.errors import InvalidRequestError
from engine.runtime import limits
from engine.runtime.decode.depth import AUTO, DraftDepth, Mtp
from engine.runtime.decode.grammar import Constraint, GrammarSpec, compile_grammar
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.penalties import Penalties
from engine.runtime.decode.policy.base import DepthPolicy, FixedDepth
from engine.runtime.decode.sampling import SamplingParams
from engine.runtime.jobs import Defaults, Generate
from engine.runtime.llama.model import Model
from engine.runtime.llama.vocab import grammar_literal, grammar_tokenizer, shown_markers
from engine.runtime.load.loader import LoadedModel, MtpSource
from engine.runtime.prompt import cachepoints, toolturns
from engine.runtime.prompt.chat import template_kwargs
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.reply import ReplyParser
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.calls import ToolFormat
from engine.runtime.prompt.tools import Tool, ToolChoice, check_tool_schemas, normalize_messages

_OFF = SamplingParams()  # the decoder's neutral values: greedy, no top-p/top-k cut
_NO_PENALTY = Penalties()

#: The one table of built-in values: what a request gets when no layer sets one (plain
#: greedy, MTP on at depth 1, no penalties, thinking unlimited). Every caller passes only
#: what its user set — as the job's own values or as a layer of :class:`Defaults`.
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
    returned as it is). Raises :class:`InvalidRequestError` naming the field at fault."""
    if job.resolved:
        return job
    layers = BUILTIN if engine_defaults is None else engine_defaults.over(BUILTIN)
    if job.defaults is not None:
        layers = job.defaults.over(layers)
    values = {name: getattr(job, name) for name in _DEFAULTED}
    values = {name: getattr(layers, name) if v is None else v for name, v in values.items()}
    try:
        mtp = Mtp(values["mtp"])
    except ValueError:
        raise InvalidRequestError(f"mtp must be 'on' or 'off', got {values['mtp']!r}", param="mtp") from None
    if job.grammar is not None:
        compile_grammar(job.grammar)  # a grammar that cannot be used is refused before the job runs
    if job.tools:
        check_tool_schemas(job.tools)
    if job.reasoning_format not in (None, "auto", "deepseek", "none"):
        raise InvalidRequestError("reasoning_format must be 'auto', 'deepseek' or 'none'", param="reasoning_format")
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
        mtp=mtp,
        draft_depth=_depth(values["draft_depth"]),
        sampled_draft=bool(values["sampled_draft"]),
        suffix_drafts=bool(values["suffix_drafts"]),
        presence_penalty=limits.check_penalty("presence_penalty", values["presence_penalty"]),
        frequency_penalty=limits.check_penalty("frequency_penalty", values["frequency_penalty"]),
        repeat_penalty=limits.check_repeat_penalty(values["repeat_penalty"]),
        logprobs=None if job.logprobs is None else limits.check_top_logprobs(job.logprobs),
        thinking_budget=None if budget is None else limits.check_thinking_budget(budget),
        # offered tools may be called unless the request says otherwise
        tool_choice=job.tool_choice or ToolChoice("auto" if job.tools else "none"),
        defaults=None,
        resolved=True,
    )


def _depth(value: object) -> DraftDepth:
    try:
        return DraftDepth.parse(value)
    except InvalidRequestError as e:
        raise InvalidRequestError(str(e), param="draft_depth") from None


@dataclass(frozen=True)
class ReplyPlan:
    """How a chat reply is split into thinking, content and tool calls."""

    #: the template's thinking markers (None: no split, or ``reasoning_format: none``)
    thinking: Thinking | None = None
    #: the prompt left a think block open: the reply starts thinking
    in_thinking: bool = False
    #: the call format to parse (None: no tools offered, or tool_choice none)
    fmt: ToolFormat | None = None
    tools: tuple[Tool, ...] = ()

    def parser(self) -> ReplyParser | None:
        if self.thinking is None and self.fmt is None:
            return None
        return ReplyParser(self.thinking, self.in_thinking, self.fmt, self.tools)


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


def prepare(job: Generate, lm: LoadedModel, texts: TokenizedTexts) -> Prepared:
    """The prompt tokens and decode parameters of a resolved ``job`` on ``lm``
    (``texts``: the model's recent conversations, whose tokens are reused)."""
    assert job.resolved, "prepare takes a resolved job (engine.runtime.request.resolve)"
    model = lm.model
    prompt_text = None
    end_tokens: frozenset[int] = frozenset()
    end_strings: tuple[str, ...] = ()
    plan: ReplyPlan | None = None
    think: Thinking | None = None
    grammar = job.grammar
    points: tuple[int, ...] = ()
    snapshots = lm.snapshots is not None and lm.snapshots.snapshots_in_prefill(model.restores_cut_back)
    if job.messages is not None:
        template = lm.template
        prompt_text, plan, think, offsets = _render_chat(job, template, model, points=snapshots)
        # a template that thinks, whose prompt neither opens nor closes the block: the model
        # may open it itself, and a budget bounds it there too
        may_open = (
            template.thinking
            if (
                think is None
                and template.thinking is not None
                and not prompt_text.rstrip().endswith(template.thinking.end)
            )
            else None
        )
        # a template that writes the BOS token gets no second one
        body = texts.tokenize(prompt_text, model.tokenize)
        prompt = model.with_bos(body)
        if offsets:
            points = cachepoints.token_points(offsets, prompt_text, prompt, model.tokenize, len(prompt) - len(body))
        end_tokens, end_strings = template.end_tokens, template.end_strings
        grammar = reply_grammar(
            lit=grammar_literal(model),
            thinking=think,
            budget=job.thinking_budget,
            answer=job.grammar,
            fmt=plan.fmt,
            tools=job.tools,
            choice=job.tool_choice,
            parallel=job.parallel_tool_calls is not False,
            may_open=may_open,
        )
    elif isinstance(job.prompt, str):
        prompt_text = job.prompt
        prompt = model.with_bos(texts.tokenize(prompt_text, model.tokenize))
        # a completion sent again (a retry, another sample) resumes one token before its end
        points = (len(prompt) - 1,) if snapshots else ()
    elif isinstance(job.prompt, list):
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < model.n_vocab for t in job.prompt):
            raise InvalidRequestError(f"prompt token ids must be integers in [0, {model.n_vocab})", param="prompt")
        prompt = list(job.prompt)
    else:
        raise InvalidRequestError("give either a prompt or messages", param="prompt")
    if not prompt:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    assert job.max_tokens is not None and job.temperature is not None and job.top_p is not None
    assert job.top_k is not None and isinstance(job.draft_depth, DraftDepth)
    assert job.presence_penalty is not None and job.frequency_penalty is not None and job.repeat_penalty is not None
    speculate = job.mtp is Mtp.ON and lm.source != MtpSource.OFF
    shown = lm.template.thinking if job.messages is not None else None  # the model may open it itself
    markers = (
        *(plan.fmt.markers if plan is not None and plan.fmt is not None else ()),
        *((shown.start, shown.end, *shown.answer_headers, *shown.answer_markers) if shown is not None else ()),
    )
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
        shown_tokens=shown_markers(model, markers) if markers else frozenset(),
        cache_points=points,
    )
    return Prepared(prompt, prompt_text, params, plan)


def _render_chat(
    job: Generate, template, model: Model, *, points: bool
) -> tuple[str, ReplyPlan, Thinking | None, list[int]]:
    """The chat prompt with the request's tools and template arguments, how its reply will
    be split, the thinking markers when the reply starts thinking, and (with ``points``)
    the text offsets worth a prompt-cache snapshot (:mod:`engine.runtime.prompt.cachepoints`)."""
    tools = job.tools
    assert job.tool_choice is not None and job.messages is not None  # resolved: normalized
    offered = tools if job.tool_choice.mode != "none" else ()
    messages, tool_list, fmt = toolturns.conversation(template.calls, job.messages, offered)

    def render(msgs: list[dict], add_generation_prompt: bool = True) -> str:
        return template.render(
            msgs,
            add_generation_prompt=add_generation_prompt,
            bos_token=model.token_text(model.bos) if model.add_bos and model.bos >= 0 else "",
            eos_token=model.token_text(model.eos) if model.eos >= 0 else "",
            tools=tool_list,
            extra=job.chat_template_kwargs,
        )

    try:
        text = render(messages)
    except InvalidRequestError:
        # agents send several system messages (Codex: instructions, then a developer
        # message; pydantic-ai's retry prompt mid-conversation), which many templates refuse
        # (Qwen3.5: "System message must be at the beginning"): the leading ones are then
        # merged into one and later ones given as user turns, and only if the template still
        # refuses is it the request's 400
        folded = toolturns.fit_system_messages(messages)
        if folded == messages:
            raise
        text = render(folded)
        messages = folded
    markers = template.thinking
    in_thinking = markers is not None and markers.opens(text)
    plan = ReplyPlan(markers if job.reasoning_format != "none" else None, in_thinking, fmt, tools)
    offsets = []
    if points:
        # what a rendering for these arguments and tools tells is kept with the template
        key = (repr(sorted((job.chat_template_kwargs or {}).items())), repr(tool_list))
        offsets = cachepoints.text_points(render, messages, text, template.points, key)
    return text, plan, markers if in_thinking else None, offsets


def _constraint(spec: GrammarSpec, model: Model, end_tokens: frozenset[int]) -> Constraint:
    """A fresh matcher for one generation, over the model's vocabulary as llguidance sees
    it (built once per model and set of end tokens)."""
    return Constraint(grammar_tokenizer(model, end_tokens), compile_grammar(spec), model.n_vocab)


def depth_policy(lm: LoadedModel, depth: DraftDepth) -> DepthPolicy:
    """The policy for ``depth`` on ``lm``: auto's is one per loaded model, starting from
    what this machine learned before; a fixed depth must fit the contexts' sizing."""
    if depth.is_auto:
        return lm.auto_depth()
    assert depth.fixed is not None
    if depth.fixed > lm.max_draft_depth:
        raise InvalidRequestError(
            f"draft depth {depth.fixed} exceeds this model's maximum of {lm.max_draft_depth} "
            "(reload it with a larger max draft depth)",
            param="draft_depth",
        )
    return FixedDepth(depth.fixed)
