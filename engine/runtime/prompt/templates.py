"""Which chat template a model is talked to with, and saying so.

1. The file's own ``tokenizer.chat_template`` (Jinja, rendered by :mod:`engine.runtime.prompt.chat`).
2. Else one of llama.cpp's built-in templates (rendered by llama.cpp itself through
   ``llama_chat_apply_template``), chosen by :mod:`engine.gguf.chatformat` from the turn
   markers the vocabulary holds as special tokens. A base model (no template) is then
   addressed in its family's format, not in markup it never saw.
3. Else ChatML, labelled as a default.

Every template comes with the markers that end a turn: they stop generation (as tokens
and as text), so no template markup ever reaches a reply. What a request needs to know of
a template — its call format, its thinking markers, where its prompts are worth a
prompt-cache snapshot — is found once, when the model loads, and kept with it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from engine.errors import InvalidRequestError
from engine.gguf.chatformat import ALL_END_MARKERS, BUILTINS, detect_builtin

#: turn ends of template families llama.cpp has no built-in for (used where a template
#: writes them; a real vocabulary holds most as end-of-generation tokens anyway)
FAMILY_END_MARKERS = (
    "<turn|>",
    "<|return|>",
    "<|call|>",
    "<|END_OF_TURN_TOKEN|>",
    "<|observation|>",
    "[e~[",
    "<｜end▁of▁sentence｜>",
)
from engine.runtime.llama.lib import llama
from engine.runtime.prompt import chat, reasoning
from engine.runtime.prompt.cachepoints import PointMemo
from engine.runtime.prompt.reasoning import Thinking
from engine.runtime.prompt.calls import Detected, detect


@dataclass(frozen=True)
class ChatTemplate:
    kind: str  # "file" | "override" | "builtin" | "default"
    name: str  # "tokenizer.chat_template" or a llama.cpp built-in name
    #: Jinja source for file templates
    source: str | None = None
    #: what ends a reply's turn: the template's end markers that are single special tokens
    #: (as token ids: they render as no text) and the others (as stop strings)
    end_tokens: frozenset[int] = frozenset()
    end_strings: tuple[str, ...] = ()
    #: the thinking markers of a template that thinks (None: it does not)
    thinking: Thinking | None = None
    #: the call format the template teaches, and whether it describes tools itself
    #: (None: llama.cpp's built-ins, which know no tools)
    calls: Detected | None = None
    #: renderings that tell where its prompts are worth a snapshot (prompt.cachepoints)
    points: PointMemo = field(default_factory=PointMemo, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        kind: str,
        name: str,
        source: str | None = None,
        end_tokens: frozenset[int] = frozenset(),
        end_strings: tuple[str, ...] = (),
    ) -> ChatTemplate:
        """The template with what requests need to know of it found now, once."""
        return cls(
            kind,
            name,
            source,
            end_tokens,
            end_strings,
            thinking=reasoning.detect(source),
            calls=detect(source) if source is not None else None,
        )

    def describe(self) -> str:
        if self.kind == "file":
            return "the model's own (tokenizer.chat_template)"
        if self.kind == "override":
            return "from --chat-template-file (instead of the model's own)"
        if self.kind == "builtin":
            return f"llama.cpp built-in '{self.name}' (the file has none; chosen from its vocabulary)"
        return "ChatML (default: the file has no template and its vocabulary matches no built-in)"

    def render(
        self,
        messages: list[dict],
        *,
        add_generation_prompt: bool = True,
        bos_token: str = "",
        eos_token: str = "",
        tools: list[dict] | None = None,
        extra: dict | None = None,
    ) -> str:
        if self.source is not None:
            if self.thinking is not None:  # enable_thinking, said in the family's own variable too
                extra = self.thinking.template_values(extra)
            return chat.render(
                self.source,
                messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
                tools=tools,
                extra=extra,
            )
        return apply_builtin(self.name, chat.validate_messages(messages), add_generation_prompt)


def apply_builtin(name: str, messages: list[dict], add_generation_prompt: bool) -> str:
    """Render ``messages`` with llama.cpp's built-in template ``name``."""
    L = llama()
    keep = [(m["role"].encode("utf-8"), m["content"].encode("utf-8", "surrogatepass")) for m in messages]
    arr = (L.llama_chat_message * len(keep))()
    for i, (role, content) in enumerate(keep):
        arr[i].role = role
        arr[i].content = content
    size = 2 * sum(len(c) + len(r) for r, c in keep) + 256
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = L.llama_chat_apply_template(name.encode(), arr, len(keep), add_generation_prompt, buf, size)
        if n < 0:
            raise InvalidRequestError(f"llama.cpp's '{name}' chat template cannot render these messages")
        if n <= size:
            return buf.raw[:n].decode("utf-8", "replace")
        size = n + 1
    raise InvalidRequestError(f"llama.cpp's '{name}' chat template output did not fit")  # pragma: no cover


def builtin_names() -> set[str]:
    L = llama()
    arr = (ctypes.c_char_p * 256)()
    n = L.llama_chat_builtin_templates(arr, 256)
    return {arr[i].decode() for i in range(min(n, 256))}


def is_special_token(model, text: str) -> bool:
    """The vocabulary holds ``text`` as one special (control) token."""
    ids = model.tokenize(text, add_special=False, parse_special=True)
    return len(ids) == 1 and model.tokenize(text, add_special=False, parse_special=False) != ids


def resolve_template(model, override: str | None = None) -> ChatTemplate:
    """The template to chat with ``model`` (a :class:`~engine.runtime.llama.model.Model`), with
    its turn ends resolved against the model's vocabulary once. ``override``: a Jinja
    template to use instead of the file's own."""
    if override:
        return _with_ends(model, "override", "--chat-template-file", override, _file_ends(override))
    own = model.chat_template
    if own:
        return _with_ends(model, "file", "tokenizer.chat_template", own, _file_ends(own))
    name = detect_builtin(lambda t: is_special_token(model, t))
    if name is not None and name in builtin_names():
        return _with_ends(model, "builtin", name, None, BUILTINS[name][1])
    return _with_ends(model, "default", "chatml", chat.CHATML, BUILTINS["chatml"][1])


def _file_ends(source: str) -> tuple[str, ...]:
    """The turn-end markers a template writes, less its thinking end (harmony's ``<|end|>``
    closes the analysis channel, not the turn, though phi-3 ends turns with it)."""
    thinking = reasoning.detect(source)
    return tuple(
        m for m in (*ALL_END_MARKERS, *FAMILY_END_MARKERS) if m in source and (thinking is None or m != thinking.end)
    )


def _with_ends(model, kind: str, name: str, source: str | None, markers: tuple[str, ...]) -> ChatTemplate:
    tokens, strings = set(), []
    for m in markers:
        if is_special_token(model, m):
            tokens.add(model.tokenize(m, add_special=False, parse_special=True)[0])
        else:
            strings.append(m)
    return ChatTemplate.of(kind, name, source, frozenset(tokens), tuple(strings))
