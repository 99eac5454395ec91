"""Chat prompts: the model's own template, rendered the way transformers and llama.cpp do.

``tokenizer.chat_template`` is a Jinja template; it is rendered in a sandbox with the
globals those renderers provide (``raise_exception``, ``strftime_now``, ``bos_token``,
``eos_token``, ``add_generation_prompt``). A model without a template is talked to with
one of llama.cpp's built-in templates chosen from its vocabulary, and only when none
matches with :data:`CHATML` (the order is :func:`engine.runtime.prompt.templates.resolve_template`'s).

Tokenizing a conversation's next turn reuses the tokens of the turns before it
(:mod:`engine.runtime.prompt.tokenized`).
"""

from __future__ import annotations

import datetime
from functools import lru_cache

from engine.errors import InvalidRequestError

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

ROLES = ("system", "user", "assistant", "tool")
#: content parts that are text, by the names the APIs give them (OpenAI chat and
#: Responses, Anthropic)
TEXT_PARTS = ("text", "input_text", "output_text")


def not_text(where: str, what: str) -> str:
    """The one refusal of content that is not text (an image, audio, a file, a document),
    whatever API brought it: where it is, what it is, and what to do. Each API raises it in
    its own error shape."""
    return (
        f"{where} is {what}: only text is served for now (images, audio and files are not); send it as text, "
        "or leave it out"
    )


def _generation_tag():
    """``{% generation %}…{% endgeneration %}`` (transformers' assistant-mask markers, used
    by LFM2.5 and Laguna templates): renders its body."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return Generation


@lru_cache(maxsize=16)
def _compile(template: str):
    from jinja2 import TemplateError
    from jinja2.sandbox import SandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        import json

        def plain(o):  # e.g. the generator of `tools | map(attribute='function')`
            if hasattr(o, "__iter__") and not isinstance(o, (str, bytes, dict)):
                return list(o)
            raise TypeError(f"{type(o).__name__} is not JSON")

        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys, default=plain
        )

    # sandboxed (no access to Python internals); templates may build their own lists
    # (Kimi's append to one), as llama.cpp's and vLLM's renderers allow
    env = SandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _generation_tag()]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def validate_messages(messages: list[dict]) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("messages must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequestError(f"messages[{i}] must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ROLES:
            raise InvalidRequestError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        content = m.get("content", "")
        if isinstance(content, list):  # OpenAI content parts: keep the text parts
            parts = []
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                if kind not in TEXT_PARTS:
                    raise InvalidRequestError(
                        not_text(f"messages[{i}].content[{j}]", f"a {kind!r} part"), param="messages"
                    )
                parts.append(str(part.get("text", "")))
            content = "".join(parts)
        elif content is None:  # an assistant turn that only calls tools: "" as llama.cpp passes it
            content = ""
        elif not isinstance(content, str):
            raise InvalidRequestError(f"messages[{i}].content must be a string")
        reasoning = m.get("reasoning_content", m.get("reasoning"))
        if reasoning is not None and not isinstance(reasoning, str):
            raise InvalidRequestError(f"messages[{i}].reasoning_content must be a string")
        msg = {**m, "role": role, "content": content}
        if reasoning is not None:
            msg["reasoning_content"] = reasoning
        out.append(msg)
    return out


#: names a request's chat_template_kwargs may not set (the renderer's own)
RESERVED = frozenset(
    {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now"}
)


def template_kwargs(extra: dict | None) -> dict:
    """A request's ``chat_template_kwargs`` (e.g. ``enable_thinking``), checked."""
    if not extra:
        return {}
    if not isinstance(extra, dict):
        raise InvalidRequestError("'chat_template_kwargs' must be an object", param="chat_template_kwargs")
    bad = [k for k in extra if not isinstance(k, str) or not k.isidentifier() or k in RESERVED]
    if bad:
        raise InvalidRequestError(
            f"'chat_template_kwargs' cannot set {', '.join(map(str, bad))}", param="chat_template_kwargs"
        )
    return dict(extra)


def render(
    template: str | None,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    tools: list[dict] | None = None,
    extra: dict | None = None,
) -> str:
    """``messages`` rendered by ``template``, with ``tools`` (OpenAI's shape) and the
    request's ``chat_template_kwargs`` (``extra``) in its context."""
    from jinja2 import TemplateError

    msgs = validate_messages(messages)
    context = template_kwargs(extra)
    if tools:
        context["tools"] = tools
    try:
        return _compile(template or CHATML).render(
            messages=msgs,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            **context,
        )
    except TemplateError as e:
        raise InvalidRequestError(f"the model's chat template rejected these messages: {e}") from None
    except Exception as e:  # a template's own bug (a None it did not expect, str + dict …): still the request's 400
        raise InvalidRequestError(
            f"the model's chat template failed on these messages: {type(e).__name__}: {e}"
        ) from None
