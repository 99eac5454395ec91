"""Ollama's API mapped to engine jobs and back, for the clients that look for a local
Ollama (VS Code Copilot, Open WebUI, Continue, Cline, aider's ``ollama_chat/``, Zed).

``/api/chat`` and ``/api/generate`` take ``messages`` (with ``tool_calls``, ``thinking``
and tool results) or a ``prompt``, ``tools``, ``think`` (on/off, or an effort), ``format``
(``"json"`` or a JSON schema: the job's grammar) and ``options`` (``num_predict``, whose "no
limit" values, 0 and below, give the defaults' length, ``temperature``, ``top_p``,
``top_k``, ``seed``, ``stop``; ``num_ctx`` is honoured up to the loaded context and refused
with words beyond it); ``keep_alive`` sets how long the model stays loaded after the reply
(engine.runtime.ondemand; a body without a prompt only loads, or with ``keep_alive: 0``
unloads). Replies stream as NDJSON, one object a line, the last with ``done: true``
and Ollama's counts and durations. The job is decided where every request is
(:meth:`Engine.resolve <engine.runtime.engine.Engine.resolve>`).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidRequestError
from engine.runtime import jobs as J
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.prompt.reply import CALL, CONTENT, REASONING
from engine.runtime.prompt.tools import parse_tools
from engine.server.errors import HTTPError
from engine.server.ondemand.listing import Listed
from engine.server.schemas import Resolve, bad, get, mtp_of
from engine.runtime.media.intake import MediaPolicy
from engine.server.apis import mediaparts, thinking

#: the Ollama version this endpoint answers as (clients check for a recent one)
VERSION = "0.13.0"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def iso_in(seconds: float) -> str:
    """The UTC time ``seconds`` from now, as Ollama writes times."""
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return t.isoformat().replace("+00:00", "Z")


def model_name(body: Any, models: dict[str, Any]) -> str:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name:
        raise bad("'model' is required (see GET /api/tags)", "model")
    if name not in models:
        bare = name.removesuffix(":latest")
        if bare in models:
            return bare
        known = ", ".join(models) or "none"
        raise HTTPError(404, f"model '{name}' not found (loaded: {known})", code="model_not_found")
    return name


def details(m: Listed) -> dict:
    return {
        "parent_model": "",
        "format": "gguf",
        "family": m.architecture,
        "families": [m.architecture],
        "parameter_size": "",
        "quantization_level": m.quantization,
    }


def tag(m: Listed) -> dict:
    """A model as ``/api/tags`` lists it (loaded or not)."""
    return {
        "name": m.name,
        "model": m.name,
        "modified_at": now_iso(),
        "size": m.size,
        "digest": "",
        "details": details(m),
    }


def show(m: Listed) -> dict:
    """``/api/show``'s answer for ``m``."""
    arch = m.architecture or "unknown"
    return {
        "license": "",
        "modelfile": "",
        "parameters": "",
        "template": m.chat_template,
        "details": details(m),
        "model_info": {
            "general.architecture": arch,
            f"{arch}.context_length": m.context_length,
            f"{arch}.embedding_length": m.n_embd,
        },
        "capabilities": list(m.capabilities),
        "modified_at": now_iso(),
    }


@dataclass
class OllamaRequest:
    job: J.Generate
    model: str
    stream: bool
    chat: bool


def _messages(raw: Any, media: MediaPolicy = mediaparts.BYTES_ONLY) -> list[dict]:
    """Ollama's ``messages`` as chat messages (``images`` as media parts, where Ollama
    places them: :func:`engine.server.apis.mediaparts.ollama_content`)."""
    if not isinstance(raw, list) or not raw:
        raise bad("'messages' must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise bad(f"messages[{i}] must be an object", "messages")
        images = mediaparts.ollama_images(m.get("images"), f"messages[{i}].images", media)
        msg: dict = {
            "role": m.get("role"),
            "content": mediaparts.ollama_content(m.get("content") or "", images, f"messages[{i}].content"),
        }
        if m.get("thinking"):
            msg["reasoning_content"] = m["thinking"]
        if m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise bad(f"messages[{i}].tool_calls must be a list", "messages")
            calls = []
            for j, c in enumerate(m["tool_calls"]):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict):
                    raise bad(
                        f"messages[{i}].tool_calls[{j}] must be {{'function': {{'name', 'arguments'}}}}", "messages"
                    )
                calls.append(
                    {
                        "id": c.get("id") or f"call_{i}_{j}",
                        "type": "function",
                        "function": {"name": fn.get("name"), "arguments": fn.get("arguments") or {}},
                    }
                )
            msg["tool_calls"] = calls
        if msg["role"] == "tool":
            # Ollama's tool results name the tool, not the call: answer the latest open call
            msg["tool_call_id"] = m.get("tool_call_id") or _last_call(out, m.get("tool_name"))
        out.append(msg)
    return out


def _last_call(messages: list[dict], name: Any) -> str | None:
    """The earliest call of the latest assistant turn with calls (of tool ``name`` when
    given) that no tool message has answered yet."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    for m in reversed(messages):
        calls = m.get("tool_calls") or []
        if calls:
            for c in calls:
                if c["id"] not in answered and (name is None or c["function"]["name"] == name):
                    return c["id"]
            return None
    return None


def _format(raw: Any) -> GrammarSpec | None:
    if raw is None or raw == "":
        return None
    if raw == "json":
        return GrammarSpec("json_object", param="format")
    if isinstance(raw, dict):
        return GrammarSpec.json_schema(raw, param="format")
    raise bad("'format' must be \"json\" or a JSON schema", "format")


def _num_predict(opts: dict) -> int | None:
    """``options.num_predict`` as the job's ``max_tokens`` (None: the defaults'). Its JSON
    type is checked here; its range, like every API's ``max_tokens``, by the decider.

    Ollama's runner limits a reply only for a positive ``num_predict``: -1 is documented as
    "no limit", -2 as "fill the context", and 0 limits nothing either. Those are its words
    for "no limit of the request's own", not values out of range: a reply here is always
    bounded, so they take the defaults' length."""
    n = opts.get("num_predict")
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int):
        raise bad("options.num_predict must be a whole number (the most tokens the reply may have)", "num_predict")
    return n if n > 0 else None


def parse(
    body: Any,
    models: dict[str, ModelInfo],
    resolve: Resolve,
    defaults: J.Defaults | None,
    *,
    chat: bool,
    media: MediaPolicy = mediaparts.BYTES_ONLY,
) -> OllamaRequest:
    """``body`` (``/api/chat``'s with ``chat``, else ``/api/generate``'s) as a resolved job
    (``media``: the endpoint's settings for where images may come from)."""
    name = model_name(body, models)
    opts = get(body, "options", (dict,), {}) or {}
    n_ctx = models[name].n_ctx
    num_ctx = opts.get("num_ctx")
    if num_ctx is not None and (not isinstance(num_ctx, int) or isinstance(num_ctx, bool) or num_ctx > n_ctx):
        raise bad(
            f"options.num_ctx {num_ctx!r} is more than this model's loaded context of {n_ctx} tokens: load it "
            "with a larger context (in the app, or `mtp-studio serve --ctx N`), or ask for at most that",
            "num_ctx",
        )
    if chat:
        prompt: dict = {"messages": _messages(body.get("messages"), media)}
        tools = None
        try:
            tools = parse_tools(body.get("tools"))
        except InvalidRequestError as e:
            raise bad(str(e), e.param) from None
        prompt["tools"] = tools
    else:
        text = body.get("prompt")
        if not isinstance(text, str):
            raise bad("'prompt' must be a string", "prompt")
        images = mediaparts.ollama_images(body.get("images") or None, "images", media)
        system = body.get("system")
        if body.get("raw") and images:  # a raw prompt is the model's own text: no place for an image
            raise bad(
                "'images' cannot go with 'raw': true (a raw prompt is text the template does not see); leave out "
                "'raw' so the model's template places them, or send /api/chat messages",
                "images",
            )
        if body.get("raw"):
            prompt = {"prompt": text}
        else:
            msgs = [{"role": "system", "content": system}] if isinstance(system, str) and system else []
            prompt = {
                "messages": [*msgs, {"role": "user", "content": mediaparts.ollama_content(text, images, "prompt")}]
            }
    thinks = thinking.ollama(body.get("think"))
    stop = opts.get("stop")
    mtp, depth = mtp_of(body)
    job = J.Generate(
        model=name,
        max_tokens=_num_predict(opts),
        stop=tuple(stop) if isinstance(stop, list) else ((stop,) if isinstance(stop, str) else ()),
        temperature=opts.get("temperature"),
        top_p=opts.get("top_p"),
        top_k=opts.get("top_k"),
        seed=opts.get("seed"),
        mtp=mtp,
        draft_depth=depth,
        grammar=_format(body.get("format")),
        chat_template_kwargs=thinks.template_kwargs if "messages" in prompt else None,
        thinking_budget=thinks.budget,
        rounds=False,
        defaults=defaults,
        **prompt,
    )
    return OllamaRequest(resolve(job), name, body.get("stream", True) is not False, chat)


# ----------------------------------------------------------------- output
def _call(c, index: int = 0) -> dict:
    try:  # a call cut by max_tokens may not be whole JSON: Ollama's arguments are an object
        args = json.loads(c.arguments) if c.arguments else {}
    except ValueError:
        args = {}
    return {
        "id": c.id,
        "function": {"index": index, "name": c.name, "arguments": args if isinstance(args, dict) else {}},
    }


def chunk(req: OllamaRequest, ev: J.Tokens) -> dict | None:
    """One streamed line for an engine event (None: nothing to say yet)."""
    content, thinking, calls = "", "", []
    if ev.parts is None:
        content = ev.text
    else:
        for p in ev.parts:
            if p.kind == REASONING:
                thinking += p.text
            elif p.kind == CONTENT:
                content += p.text
            elif p.kind == CALL and p.call is not None:
                calls.append(_call(p.call, p.index))
    if not (content or thinking or calls):
        return None
    base = {"model": req.model, "created_at": now_iso(), "done": False}
    if not req.chat:
        return {**base, "response": content, **({"thinking": thinking} if thinking else {})}
    msg: dict = {"role": "assistant", "content": content}
    if thinking:
        msg["thinking"] = thinking
    if calls:
        msg["tool_calls"] = calls
    return {**base, "message": msg}


def final(req: OllamaRequest, res: J.GenerateResult, whole: bool) -> dict:
    """The last object (``whole``: it carries the whole reply, for ``stream: false``)."""
    s = res.stats
    out: dict = {
        "model": req.model,
        "created_at": now_iso(),
        "done": True,
        "done_reason": "length" if res.ending is J.Ending.CUT else "stop",
        "total_duration": int((s.prompt_ms + s.generation_ms) * 1e6),
        "load_duration": 0,
        "prompt_eval_count": res.prompt_tokens,
        "prompt_eval_duration": int(s.prompt_ms * 1e6),
        "eval_count": len(res.tokens),
        "eval_duration": int(s.generation_ms * 1e6),
    }
    reply = res.reply
    content = (reply.content if reply is not None else res.text) if whole else ""
    if req.chat:
        msg: dict = {"role": "assistant", "content": content}
        if whole and reply is not None:
            if reply.reasoning:
                msg["thinking"] = reply.reasoning
            if reply.calls:
                msg["tool_calls"] = [_call(c, i) for i, c in enumerate(reply.calls)]
        out["message"] = msg
    else:
        out["response"] = content
        if whole and reply is not None and reply.reasoning:
            out["thinking"] = reply.reasoning
    return out
