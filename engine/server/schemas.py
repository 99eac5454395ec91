"""Parsing and checking OpenAI request bodies into engine jobs.

Only what the engine honours is accepted; anything it would silently ignore in a way
that changes the result (n > 1, logprobs, tools, penalties) is a 400 that says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime import limits
from engine.runtime.decode.depth import AUTO_TEXT, DraftDepth
from engine.server.errors import HTTPError


@dataclass
class Parsed:
    job: J.Generate
    model: str
    stream: bool
    include_usage: bool


def _bad(message: str, param: str | None = None) -> HTTPError:
    return HTTPError(400, message, param=param, code="invalid_request_error" if param is None else "invalid_value")


def _get(body: dict, key: str, types: tuple[type, ...], default: Any = None) -> Any:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in types:
        raise _bad(f"'{key}' must be {' or '.join(t.__name__ for t in types)}", key)
    if not isinstance(v, types):
        raise _bad(f"'{key}' must be {' or '.join(t.__name__ for t in types)}", key)
    return v


def _common(body: dict, models: dict[str, dict], default_depth: int | str | None) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required (see GET /v1/models)", "model")
    if model not in models:
        known = ", ".join(models) or "none"
        raise HTTPError(
            404, f"The model '{model}' does not exist or is not loaded (loaded: {known}).", code="model_not_found", param="model"
        )
    n = _get(body, "n", (int,), 1)
    if n != 1:
        raise _bad("only n=1 is supported", "n")
    for key in ("presence_penalty", "frequency_penalty"):
        if _get(body, key, (int, float), 0) != 0:
            raise _bad(f"'{key}' is not supported (only 0)", key)
    if body.get("logprobs") not in (None, False, 0):
        raise _bad("'logprobs' is not supported", "logprobs")
    if body.get("tools") or body.get("functions"):
        raise _bad("tool calling is not supported by this endpoint", "tools")
    rf = body.get("response_format")
    if rf not in (None, {"type": "text"}):
        raise _bad("only response_format {'type': 'text'} is supported", "response_format")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = 512
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _bad("'max_tokens' must be an integer >= 1", "max_tokens")
    try:
        stop = limits.check_stop(body.get("stop") or ())
    except InvalidRequestError as e:
        raise _bad(str(e), "stop") from None
    temperature = float(_get(body, "temperature", (int, float), 0.0))
    if not 0.0 <= temperature <= 2.0:
        raise _bad("'temperature' must be between 0 and 2", "temperature")
    top_p = float(_get(body, "top_p", (int, float), 1.0))
    if not 0.0 < top_p <= 1.0:
        raise _bad("'top_p' must be in (0, 1]", "top_p")
    top_k = _get(body, "top_k", (int,), 0)
    if top_k < 0:
        raise _bad("'top_k' must be >= 0 (0: no limit)", "top_k")
    try:
        seed = limits.check_seed(_get(body, "seed", (int,), None))
    except InvalidRequestError as e:
        raise _bad(str(e), "seed") from None
    stream = bool(_get(body, "stream", (bool,), False))
    opts = _get(body, "stream_options", (dict,), {}) or {}
    include_usage = bool(opts.get("include_usage", False))
    mtp = _get(body, "mtp", (str,), "on")
    if mtp not in ("on", "off"):
        raise _bad("'mtp' must be 'on' or 'off'", "mtp")
    ignore_eos = bool(_get(body, "ignore_eos", (bool,), False))  # llama-server's extension
    sampled_draft = bool(_get(body, "sampled_draft", (bool,), False))  # MTP Studio's extension
    depth = body.get("draft_depth", default_depth)
    if depth is not None:
        if isinstance(depth, str) and depth != AUTO_TEXT:  # JSON: a number or "auto", not "3"
            raise _bad("'draft_depth' must be an integer >= 1 or 'auto'", "draft_depth")
        try:
            depth = DraftDepth.parse(depth)
        except InvalidRequestError:
            raise _bad("'draft_depth' must be an integer >= 1 or 'auto'", "draft_depth") from None
    return {
        "model": model,
        "max_tokens": max_tokens,
        "stop": stop,
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "seed": seed,
        "stream": stream,
        "include_usage": include_usage,
        "mtp": mtp,
        "draft_depth": depth,
        "ignore_eos": ignore_eos,
        "sampled_draft": sampled_draft,
    }


def _job(c: dict[str, Any], **prompt: Any) -> J.Generate:
    return J.Generate(
        model=c["model"],
        max_tokens=c["max_tokens"],
        stop=c["stop"],
        temperature=c["temperature"],
        top_p=c["top_p"],
        top_k=c["top_k"],
        seed=c["seed"],
        mtp=c["mtp"],
        draft_depth=c["draft_depth"],
        ignore_eog=c["ignore_eos"],
        sampled_draft=c["sampled_draft"],
        **prompt,
    )


def parse_chat(body: Any, models: dict[str, dict], default_depth: int | str | None = None) -> Parsed:
    c = _common(body, models, default_depth)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    return Parsed(_job(c, messages=messages), c["model"], c["stream"], c["include_usage"])


def parse_completion(body: Any, models: dict[str, dict], default_depth: int | str | None = None) -> Parsed:
    c = _common(body, models, default_depth)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise _bad("'prompt' is empty", "prompt")
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompt = list(prompt)
    else:
        raise _bad("'prompt' must be a string or a list of token ids (one prompt per request)", "prompt")
    if body.get("echo"):
        raise _bad("'echo' is not supported", "echo")
    if body.get("suffix"):
        raise _bad("'suffix' is not supported", "suffix")
    return Parsed(_job(c, prompt=prompt), c["model"], c["stream"], c["include_usage"])
