"""The text and tokens of recent prompts plus their replies, so the next turn of a
conversation tokenizes only its new text and the engine reuses its state for everything
before it: re-tokenizing a reply can split it differently from how it was generated,
which would waste what the contexts (and the prompt cache's snapshots) hold.

Not the prompt cache: that one holds decoding state
(:mod:`engine.runtime.decode.cache.snapshotcache`); this one only text and token ids.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class TokenizedTexts:
    """Text and tokens of the last few prompts plus their generated replies (one per
    conversation that took turns lately), newest last.

    Shared by every request on one model, prepared and finished on their own threads:
    any thread may call it; a lock keeps the list whole (tokenizing runs outside it)."""

    def __init__(self, size: int = 16):
        self.size = size
        self._entries: list[tuple[str, tuple[int, ...]]] = []
        self._lock = threading.Lock()

    def tokenize(self, text: str, tokenize: Callable[[str], list[int]]) -> list[int]:
        """Tokens for ``text``, reusing the tokens of the longest remembered text that
        ``text`` extends."""
        with self._lock:
            entries = list(self._entries)
        best = None
        for known, tokens in entries:
            if (
                known
                and len(text) > len(known)
                and text.startswith(known)
                and (best is None or len(known) > len(best[0]))
            ):
                best = (known, tokens)
        if best is not None:
            return [*best[1], *tokenize(text[len(best[0]) :])]
        return tokenize(text)

    def remember(self, prompt_text: str, prompt_tokens: list[int], reply_text: str, reply_tokens: list[int]) -> None:
        text = prompt_text + reply_text
        if not text:
            return
        entry = (text, (*prompt_tokens, *reply_tokens))
        with self._lock:
            # the conversation's earlier turn is superseded by this one
            self._entries = [e for e in self._entries if not text.startswith(e[0])]
            self._entries.append(entry)
            del self._entries[: -self.size]
