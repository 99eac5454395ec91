"""Chat prompts: the model's own template, rendered the way transformers and llama.cpp do.

``tokenizer.chat_template`` is a Jinja template; it is rendered in a sandbox with the
globals those renderers provide (``raise_exception``, ``strftime_now``, ``bos_token``,
``eos_token``, ``add_generation_prompt``). A model without a template is talked to with
one of llama.cpp's built-in templates chosen from its vocabulary, and only when none
matches with :data:`CHATML` (the order is :func:`engine.runtime.prompt.templates.resolve_template`'s).

:class:`PromptCache` keeps the text and tokens of the last prompt + reply, so the next
turn of a conversation tokenizes only the new text and the engine reuses the KV cache
for everything before it (re-tokenizing a reply can split it differently from how it
was generated, which would waste the cache).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from engine.errors import InvalidRequestError

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

ROLES = ("system", "user", "assistant", "tool")


@lru_cache(maxsize=16)
def _compile(template: str):
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        import json

        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
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
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise InvalidRequestError(f"messages[{i}].content: only text parts are supported")
                parts.append(str(part.get("text", "")))
            content = "".join(parts)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise InvalidRequestError(f"messages[{i}].content must be a string")
        out.append({**m, "role": role, "content": content})
    return out


def render(
    template: str | None,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    from jinja2 import TemplateError

    msgs = validate_messages(messages)
    try:
        return _compile(template or CHATML).render(
            messages=msgs,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except TemplateError as e:
        raise InvalidRequestError(f"the model's chat template rejected these messages: {e}") from None


@dataclass
class PromptCache:
    """Text and tokens of the last prompt plus its generated reply."""

    text: str = ""
    tokens: tuple[int, ...] = ()

    def tokenize(self, text: str, tokenize: Callable[[str], list[int]]) -> list[int]:
        """Tokens for ``text``, reusing the cached tokens when ``text`` extends the
        cached text."""
        if self.text and text.startswith(self.text) and len(text) > len(self.text):
            return [*self.tokens, *tokenize(text[len(self.text) :])]
        return tokenize(text)

    def remember(self, prompt_text: str, prompt_tokens: list[int], reply_text: str, reply_tokens: list[int]) -> None:
        self.text = prompt_text + reply_text
        self.tokens = (*prompt_tokens, *reply_tokens)
