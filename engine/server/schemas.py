"""OpenAI request bodies mapped to engine jobs.

Only what the engine honours is accepted; anything it would silently ignore in a way
that changes the result (n > 1, legacy ``functions``) is a 400 that says so. Chat requests
may offer ``tools`` (with ``tool_choice`` and ``parallel_tool_calls``) and steer thinking
(``chat_template_kwargs``, ``reasoning_format``, ``thinking_budget_tokens``).
Output constraints (``response_format``, ``json_schema``, ``grammar``, ``regex``) become
the job's grammar. JSON types are checked here; the job is then decided once, before it
is queued, by the engine's request step (:meth:`Engine.resolve
<engine.runtime.engine.Engine.resolve>`: :mod:`engine.runtime.decider`, ranges in
:mod:`engine.runtime.limits`), with the endpoint's settings as the submitter's layer of
defaults over the engine's — a bad value is a 400 now, not after the job waited its turn,
and the resolved job is what runs.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.runtime import jobs as J
from engine.runtime.decode.depth import AUTO_TEXT, Mtp
from engine.runtime.decode.grammar import GrammarSpec
from engine.errors import InvalidRequestError
from engine.runtime.prompt.tools import parse_choice, parse_tools
from engine.server.apis import thinking
from engine.server.errors import HTTPError, bad
from engine.runtime.modelinfo import ModelInfo

#: decides a job (Engine.resolve): every value set, checked, and marked resolved
Resolve = Callable[[J.Generate], J.Generate]


@dataclass
class Parsed:
    job: J.Generate
    model: str
    stream: bool
    include_usage: bool


def get(body: dict, key: str, types: tuple[type, ...], default: Any = None) -> Any:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in types:
        raise bad(f"'{key}' must be {' or '.join(t.__name__ for t in types)}", key)
    if not isinstance(v, types):
        raise bad(f"'{key}' must be {' or '.join(t.__name__ for t in types)}", key)
    return v


def _common(body: dict, models: dict[str, ModelInfo]) -> dict[str, Any]:
    """The request's fields as job values (JSON types checked here; ranges by the engine's
    request step, :func:`engine.runtime.decider.resolve`)."""
    model = model_of(body, models)
    n = get(body, "n", (int,), 1)
    if n != 1:
        raise bad("only n=1 is supported", "n")
    if body.get("functions") or body.get("function_call"):
        raise bad("'functions' is OpenAI's retired form: send 'tools' (and 'tool_choice') instead", "functions")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    stream = bool(get(body, "stream", (bool,), False))
    opts = get(body, "stream_options", (dict,), {}) or {}
    include_usage = bool(opts.get("include_usage", False))
    return {
        "model": model,
        "max_tokens": max_tokens,
        "stop": body.get("stop") or (),
        **sampling_of(body),
        "stream": stream,
        "include_usage": include_usage,
        "ignore_eog": bool(get(body, "ignore_eos", (bool,), False)),  # llama-server's extension
        "sampled_draft": get(body, "sampled_draft", (bool,), None),  # MTP Studio's extension
        "suffix_drafts": get(body, "suffix_drafts", (bool,), None),  # MTP Studio's extension
        "grammar": _grammar(body),
        "presence_penalty": get(body, "presence_penalty", (int, float), None),
        "frequency_penalty": get(body, "frequency_penalty", (int, float), None),
        "repeat_penalty": get(body, "repeat_penalty", (int, float), None),  # llama-server's
        "logprobs": _logprobs(body),
    }


def model_of(body: Any, models: dict[str, ModelInfo]) -> str:
    """The loaded model a request body names (400 without one, 404 for one not loaded)."""
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' is required (see GET /v1/models)", "model")
    if model not in models:
        known = ", ".join(models) or "none"
        raise HTTPError(
            404,
            f"The model '{model}' does not exist or is not loaded (loaded: {known}).",
            code="model_not_found",
            param="model",
        )
    return model


def mtp_of(body: dict) -> tuple[Mtp | None, Any]:
    """MTP Studio's own fields, the same in every API: ``mtp`` ("on"/"off") and
    ``draft_depth`` (an integer or "auto")."""
    mtp = get(body, "mtp", (str,), None)
    if mtp is not None and mtp not in tuple(Mtp):
        raise bad("'mtp' must be 'on' or 'off'", "mtp")
    depth = body.get("draft_depth")
    if isinstance(depth, str) and depth != AUTO_TEXT:  # JSON: a number or "auto", not "3"
        raise bad("'draft_depth' must be an integer >= 1 or 'auto'", "draft_depth")
    return (Mtp(mtp) if mtp is not None else None), depth


def sampling_of(body: dict) -> dict[str, Any]:
    """The sampling fields every API names alike, plus MTP Studio's own (``mtp``,
    ``draft_depth``), as job values (JSON types checked here, ranges by the request step)."""
    mtp, depth = mtp_of(body)
    return {
        "temperature": get(body, "temperature", (int, float), None),
        "top_p": get(body, "top_p", (int, float), None),
        "top_k": get(body, "top_k", (int,), None),
        "seed": get(body, "seed", (int,), None),
        "mtp": mtp,
        "draft_depth": depth,
    }


def new_id(prefix: str) -> str:
    """An id for a response, a message or an output item (``resp_…``, ``msg_…``)."""
    return f"{prefix}_{secrets.token_hex(12)}"


def function_tools(raw: Any, as_function: Callable[[dict], dict | None]) -> tuple[list[dict] | None, list[str]]:
    """An API's ``tools`` as the chat API's function tools (``as_function`` gives a tool's
    ``{name, description, parameters}``, or None for a tool this endpoint cannot run),
    and the names of those skipped."""
    if raw is None:
        return None, []
    if not isinstance(raw, list):
        raise bad("'tools' must be a list", "tools")
    out, skipped = [], []
    for t in raw:
        fn = as_function(t) if isinstance(t, dict) else None
        if fn is not None:
            out.append({"type": "function", "function": fn})
        else:
            skipped.append(str(t.get("name") or t.get("type")) if isinstance(t, dict) else type(t).__name__)
    return out, skipped


def _logprobs(body: dict) -> int | None:
    """How many alternatives per token (None: no log-probabilities). Chat sends
    ``logprobs: true`` and ``top_logprobs: N``; completions send ``logprobs: N``."""
    lp = body.get("logprobs")
    top = get(body, "top_logprobs", (int,), None)
    if lp is None or lp is False:
        if top is not None:
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        return None
    if lp is True:
        return 0 if top is None else top
    if isinstance(lp, int) and not isinstance(lp, bool):
        return lp
    raise bad("'logprobs' must be true/false (chat) or a number of alternatives (completions)", "logprobs")


def _grammar(body: dict) -> GrammarSpec | None:
    """The output constraint: OpenAI's ``response_format`` (``json_object``,
    ``json_schema``), llama-server's ``json_schema`` and ``grammar`` (GBNF or Lark) fields,
    or MTP Studio's ``regex``. At most one."""
    found: list[GrammarSpec] = []
    rf = body.get("response_format")
    if rf is not None:
        kind = rf.get("type") if isinstance(rf, dict) else None
        if kind == "json_object":
            found.append(GrammarSpec("json_object"))
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict) or "schema" not in js:
                raise bad(
                    "response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}",
                    "response_format",
                )
            found.append(GrammarSpec.json_schema(js["schema"]))
        elif kind != "text":
            raise bad("response_format type must be 'text', 'json_object' or 'json_schema'", "response_format")
    if body.get("json_schema") is not None:
        found.append(GrammarSpec.json_schema(body["json_schema"], param="json_schema"))
    for key, kind in (("grammar", "gbnf"), ("regex", "regex")):
        text = body.get(key)
        if text is not None:
            if not isinstance(text, str) or not text.strip():
                raise bad(f"'{key}' must be a non-empty string", key)
            found.append(GrammarSpec(kind, text, key))
    if len(found) > 1:
        raise bad("give one output constraint: response_format, json_schema, grammar or regex", found[1].param)
    return found[0] if found else None


_JOB_FIELDS = (
    "model",
    "max_tokens",
    "stop",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "mtp",
    "draft_depth",
    "ignore_eog",
    "sampled_draft",
    "suffix_drafts",
    "grammar",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "logprobs",
)


def _parsed(c: dict[str, Any], resolve: Resolve, defaults: J.Defaults | None, **prompt: Any) -> Parsed:
    job = J.Generate(**{k: c[k] for k in _JOB_FIELDS}, rounds=False, defaults=defaults, **prompt)
    return Parsed(resolve(job), c["model"], c["stream"], c["include_usage"])


def parse_chat(body: Any, models: dict[str, ModelInfo], resolve: Resolve, defaults: J.Defaults | None = None) -> Parsed:
    """A chat completion request as a resolved job (``resolve``: the engine's)."""
    c = _common(body, models)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list", "messages")
    try:
        tools = parse_tools(body.get("tools"))
        choice = parse_choice(body.get("tool_choice"), tools)
    except InvalidRequestError as e:
        raise bad(str(e), e.param) from None
    parallel = get(body, "parallel_tool_calls", (bool,), None)
    kwargs = get(body, "chat_template_kwargs", (dict,), None)
    fmt = get(body, "reasoning_format", (str,), None)
    thinks = thinking.chat(body)
    if thinks.on is not None:  # reasoning_effort, under what chat_template_kwargs says
        kwargs = {**(thinks.template_kwargs or {}), **(kwargs or {})}
    return _parsed(
        c,
        resolve,
        defaults,
        messages=messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        chat_template_kwargs=kwargs,
        reasoning_format=fmt,
        thinking_budget=thinks.budget,
    )


def parse_completion(
    body: Any, models: dict[str, ModelInfo], resolve: Resolve, defaults: J.Defaults | None = None
) -> Parsed:
    """A completion request as a resolved job (``resolve``: the engine's)."""
    c = _common(body, models)
    if body.get("tools"):
        raise bad("'tools' needs the chat API (POST /v1/chat/completions)", "tools")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise bad("'prompt' is empty", "prompt")
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompt = list(prompt)
    else:
        raise bad("'prompt' must be a string or a list of token ids (one prompt per request)", "prompt")
    if body.get("echo"):
        raise bad("'echo' is not supported", "echo")
    if body.get("suffix"):
        raise bad("'suffix' is not supported", "suffix")
    return _parsed(c, resolve, defaults, prompt=prompt)
