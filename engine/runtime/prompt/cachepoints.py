"""Where in a chat prompt a prompt-cache snapshot pays: the points a later prompt is
likely to share and then leave.

* After the system prompt (with the tools a template writes into it): a new conversation
  with the same system prompt — another chat, a client's background title request —
  shares everything up to there.
* At the start of the reply (the generation prompt): the next turn of this conversation
  re-renders the reply, and templates that drop earlier turns' thinking (Qwen3.5/3.6)
  render it differently from how it was generated, so the next prompt leaves this one
  right there.

Points are found by rendering the conversation again, never from a template's markers:
the generation prompt's start is where the rendering without it ends; the system
prompt's end is where a rendering with a stand-in first message leaves the real one.
A template that refuses either rendering, or renders something that is not a prefix,
gives no point there.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from engine.errors import InvalidRequestError

#: stands in for the first message after the system prompt (never in a real message)
_STAND_IN = "\u2063stand-in\u2063"

Render = Callable[[list[dict], bool], str]


def text_points(render: Render, messages: list[dict], text: str) -> list[int]:
    """Offsets into ``text`` (``messages`` rendered with the generation prompt) of the
    points described above. ``render(messages, add_generation_prompt)``."""
    out = []
    if len(messages) > 1 and messages[0].get("role") == "system":
        first = messages[1]
        try:
            other = render([messages[0], {"role": first.get("role", "user"), "content": _STAND_IN}], False)
        except InvalidRequestError:
            other = None
        if other is not None and _STAND_IN in other:
            out.append(_shared(other, text))
    try:
        head = render(messages, False)
    except InvalidRequestError:
        head = None
    if head is not None and len(head) < len(text) and text.startswith(head):
        out.append(len(head))
    return sorted({o for o in out if 0 < o < len(text)})


def token_points(offsets: list[int], text: str, prompt: list[int], tokenize: Callable[[str], list[int]],
                 skip: int = 0) -> tuple[int, ...]:  # fmt: skip
    """The prompt positions of ``offsets``: where the prompt's tokens (after ``skip``
    added ones, e.g. a BOS) cover exactly ``text[:offset]``. An offset inside a token
    gives no position."""
    out = []
    for o in offsets:
        toks = tokenize(text[:o])
        end = skip + len(toks)
        if toks and end < len(prompt) and prompt[skip:end] == toks:
            out.append(end)
    return tuple(out)


def _shared(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))
