"""The reply being generated, as the chat page holds it while it streams: the engine's
parts accumulated (thinking, content, tool calls), how many tokens the model thought
and for how long, the rounds so far, and at the end the message history keeps.

Plain Python, no Qt: the chat page feeds it from its job's bridge signals on the GUI
thread, and :mod:`app.pages.chat.transcript` draws it. Nothing here parses the text: the
engine splits a reply (``Tokens.parts``, :mod:`engine.runtime.prompt.reply`) when its
template thinks or tools are offered; when it sends no parts, all text is content, as
the endpoint streams it.
"""

from __future__ import annotations

import time

from engine.facade import GenerationStats, RoundStats
from engine.facade import Part, Reply


class LiveReply:
    """One reply: feed it :meth:`add_parts` and :meth:`add_text` as the bridge emits
    them (parts just before their text), :meth:`add_rounds`, then :meth:`end` with the
    engine's result and take :meth:`saved`. Times are ``time.monotonic()`` seconds."""

    def __init__(self) -> None:
        self.split: Reply | None = None  # the engine's parts so far (None: it sent none)
        self.text = ""  # the reply's text as generated
        self.tokens = 0  # tokens generated
        self.stats = GenerationStats()  # the rounds so far
        self.rate = 0.0  # tokens per second so far, from the last round's time
        self.t_first: float | None = None  # when the first text arrived
        self.thinking_tokens = 0  # tokens thought (the engine's count replaces it at the end)
        self.thinking_s: float | None = None  # seconds thought, once the answer started

    # ------------------------------------------------------------------- feed
    def add_parts(self, parts: list[Part]) -> None:
        if self.split is None:
            self.split = Reply()
        self.split.add(parts)

    def add_text(self, text: str, n: int, now: float | None = None) -> None:
        """``n`` tokens of ``text``, counted as thinking while the reply thinks."""
        now = time.monotonic() if now is None else now
        if self.t_first is None:
            self.t_first = now
        self.text += text
        self.tokens += n
        if self.thinking:
            self.thinking_tokens += n
        elif self.reasoning and self.thinking_s is None:
            self.thinking_s = now - self.t_first

    def add_rounds(self, rounds: list[RoundStats]) -> None:
        for r in rounds:
            self.stats.record(r)
        last = rounds[-1]
        self.rate = (self.tokens - 1) / last.t if last.t > 0 else 0.0

    def end(self, reply: Reply | None, text: str, thinking_tokens: int = 0) -> None:
        """The engine's result: its split of the whole reply (None: not split, ``text`` is
        the content) and its count of thinking tokens (0: keep the count so far)."""
        self.split, self.text = reply, text
        self.thinking_tokens = thinking_tokens or self.thinking_tokens

    # ------------------------------------------------------------------- read
    @property
    def content(self) -> str:
        return self.split.content if self.split is not None else self.text

    @property
    def reasoning(self) -> str:
        return self.split.reasoning if self.split is not None else ""

    @property
    def calls(self) -> list[dict]:
        """The tool calls as history keeps them: [{name, arguments, id}]."""
        calls = self.split.calls if self.split is not None else []
        return [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in calls]

    @property
    def thinking(self) -> bool:
        """Still thinking: thought so far, and neither answered nor called a tool yet."""
        r = self.split
        return r is not None and bool(r.reasoning) and not r.content and not r.calls

    def header(self, now: float | None = None) -> str | None:
        """ "Thinking… N tokens, X tok/s" while it thinks; None once it does not."""
        if not self.thinking:
            return None
        now = time.monotonic() if now is None else now
        elapsed = now - self.t_first if self.t_first is not None else 0.0
        n = self.thinking_tokens
        head = f"Thinking… {n} token{'s' if n != 1 else ''}"
        return head + (f", {n / elapsed:.1f} tok/s" if elapsed > 0.05 else "")

    def message(self) -> dict:
        """The reply so far as a history message (app.pages.chat.view draws it); the
        thinking figures once the thinking is done."""
        msg: dict = {"content": self.content, "reasoning": self.reasoning, "calls": self.calls}
        if msg["reasoning"] and not self.thinking:
            msg["stats"] = {"thinking_tokens": self.thinking_tokens, "thinking_s": self.thinking_s}
        return msg

    def saved(self, stats: dict, now: float | None = None) -> dict:
        """The finished reply as history keeps it, with ``stats`` (the thinking figures
        added to them when it thought)."""
        message = {"role": "assistant", "content": self.content, "stats": stats}
        if self.reasoning:
            if self.thinking_s is None and self.t_first is not None:
                self.thinking_s = (time.monotonic() if now is None else now) - self.t_first
            stats["thinking_tokens"] = self.thinking_tokens
            stats["thinking_s"] = round(self.thinking_s or 0.0, 2)
            message["reasoning"] = self.reasoning
        if self.calls:
            message["calls"] = self.calls
        return message
