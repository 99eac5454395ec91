"""Where in a chat prompt a prompt-cache snapshot pays: the points a later prompt is
likely to share and then leave.

* After the system prompt (with the tools a template writes into it): a new conversation
  with the same system prompt — another chat, a client's background title request —
  shares everything up to there.
* At the start of the reply (the generation prompt): the next turn of this conversation
  re-renders the reply, and templates that drop earlier turns' thinking (Qwen3.5/3.6)
  render it differently from how it was generated, so the next prompt leaves this one
  right there.

Points are found by rendering, never from a template's markers: the generation prompt's
start is where the rendering without it ends; the system prompt's end is where a
rendering with a stand-in first message leaves the real one. A template that refuses
either rendering, or renders something that is not a prefix, gives no point there.

Those renderings are kept with the loaded template (:class:`PointMemo`), so a request
does not render its template again for them: the generation prompt a template appends
(for each set of template arguments and tools) is learned once from a probe
conversation, and the system prompt's end once per system prompt. A conversation whose
prompt does not end with the learned generation prompt is rendered without it, as
before.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from engine.errors import InvalidRequestError

#: stands in for the first message after the system prompt (never in a real message)
_STAND_IN = "\u2063stand-in\u2063"

Render = Callable[[list[dict], bool], str]

#: the conversation a template's generation prompt is learned from
_PROBE = [{"role": "user", "content": _STAND_IN}]


class PointMemo:
    """What :func:`text_points` learned of one loaded template: its generation prompt and
    its rendering of recent system prompts, each keyed by the request's template arguments
    and tools. Bounded; safe from any thread."""

    SIZE = 32

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple, str | None] = OrderedDict()

    def get(self, key: tuple, compute: Callable[[], str | None]) -> str | None:
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return self._seen[key]
        value = compute()
        with self._lock:
            self._seen[key] = value
            while len(self._seen) > self.SIZE:
                self._seen.popitem(last=False)
        return value


def _try(render: Render, messages: list[dict], add_generation_prompt: bool) -> str | None:
    try:
        return render(messages, add_generation_prompt)
    except InvalidRequestError:
        return None


def generation_prompt(render: Render) -> str | None:
    """What the template appends for ``add_generation_prompt`` (None: it cannot be told
    from a probe conversation)."""
    bare, prompted = _try(render, _PROBE, False), _try(render, _PROBE, True)
    if bare is None or prompted is None or len(prompted) <= len(bare) or not prompted.startswith(bare):
        return None
    return prompted[len(bare) :]


def text_points(
    render: Render, messages: list[dict], text: str, memo: PointMemo | None = None, key: tuple = ()
) -> list[int]:
    """Offsets into ``text`` (``messages`` rendered with the generation prompt) of the
    points described above. ``render(messages, add_generation_prompt)``; with ``memo``
    (the template's, for requests rendering with the same arguments and tools: ``key``)
    what was rendered for an earlier request is reused."""
    memo = memo if memo is not None else PointMemo()
    out = []
    if len(messages) > 1 and messages[0].get("role") == "system":
        first = messages[1]
        stand_in = [messages[0], {"role": first.get("role", "user"), "content": _STAND_IN}]
        other = memo.get(("system", key, repr(stand_in)), lambda: _try(render, stand_in, False))
        if other is not None and _STAND_IN in other:
            out.append(_shared(other, text))
    suffix = memo.get(("generation", key), lambda: generation_prompt(render))
    if suffix and text.endswith(suffix):
        out.append(len(text) - len(suffix))
    else:
        head = _try(render, messages, False)
        if head is not None and len(head) < len(text) and text.startswith(head):
            out.append(len(head))
    return sorted({o for o in out if 0 < o < len(text)})


def token_points(
    offsets: list[int], text: str, prompt: list[int], tokenize: Callable[[str], list[int]], skip: int = 0
) -> tuple[int, ...]:
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
