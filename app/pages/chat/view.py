"""The chat transcript's HTML: message bubbles, thinking blocks and tool-call cards.

An assistant message is a dict as history keeps it: ``content`` (Markdown), and when the
engine split the reply ``reasoning`` (the thinking text), ``calls`` ([{name, arguments,
id}]) and ``stats`` (``thinking_tokens``, ``thinking_s``); nothing here splits text
itself. Links the transcript handles (:mod:`app.pages.chat.transcript`): ``think:KEY`` opens
or closes a thinking block, ``copy:N`` copies code block N. Only text written by this
module is markup: every other string is escaped or goes through :mod:`app.markdown`,
which keeps raw HTML as text. Plain functions, called on the GUI thread.
"""

from __future__ import annotations

import html
import json

from app.markdown import mono_family, to_html

MUTED = "#6b7385"


def _escape(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def who_html(role: str) -> str:
    who = {"user": "You", "assistant": "Assistant"}.get(role, role.title())
    color = "#3d7bf0" if role == "user" else "#1f8a5b"
    return f'<p style="margin:10px 0 2px 0"><b style="color:{color}">{who}</b></p>'


def plain_html(role: str, text: str, pictures: str = "") -> str:
    """A user (or system, tool) message: plain text, never markup, then its pictures
    (:func:`pictures_html`)."""
    body = f'<p style="margin:0 0 6px 0">{_escape(text)}</p>' if text or not pictures else ""
    return who_html(role) + body + pictures


def pictures_html(sources: list[tuple[str, str]]) -> str:
    """A message's pictures in a row: (resource URL the transcript serves, tooltip) each."""
    if not sources:
        return ""
    imgs = "&nbsp;&nbsp;".join(
        f'<img src="{html.escape(src)}" title="{html.escape(tip)}" style="vertical-align:top">' for src, tip in sources
    )
    return f'<p style="margin:2px 0 6px 0">{imgs}</p>'


def error_html(text: str) -> str:
    """Why the last turn got no reply (not kept with the conversation)."""
    return f'<p style="margin:6px 0 6px 0; color:#b3261e">Not answered: {_escape(text)}</p>'


def thought_header(stats: object) -> str:
    """ "Thought for N tokens, X.X s" from a message's stats (what it has of them)."""
    stats = stats if isinstance(stats, dict) else {}
    n, s = stats.get("thinking_tokens"), stats.get("thinking_s")
    words = []
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        words.append(f"{n} token{'s' if n != 1 else ''}")
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        words.append(f"{s:.1f} s")
    return "Thought for " + ", ".join(words) if words else "Thought"


def thinking_html(key: str, reasoning: str, header: str, *, expanded: bool, live: bool = False) -> str:
    """The thinking block: a header (a toggle once thinking is done) and, when open or
    while thinking, the thinking text in a grey box."""
    if live:
        head = f'<span style="color:{MUTED}"><i>{html.escape(header)}</i></span>'
    else:
        arrow = "▾" if expanded else "▸"
        head = (
            f'<a href="think:{html.escape(key)}" style="color:{MUTED}; text-decoration:none">'
            f"{arrow} {html.escape(header)}</a>"
        )
    out = f'<p style="margin:2px 0 4px 0">{head}</p>'
    if (expanded or live) and reasoning.strip():
        out += (
            '<table width="100%" cellspacing="0" cellpadding="6" style="margin-bottom:6px"><tr>'
            '<td width="3" bgcolor="#c8cedb"></td>'
            f'<td bgcolor="#f7f8fa"><span style="color:#5d6577">{_escape(reasoning.strip())}</span></td>'
            "</tr></table>"
        )
    return out


def pretty_arguments(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return str(arguments)


def call_card(name: str, arguments: str) -> str:
    """A tool call: its name and its arguments, pretty-printed."""
    return (
        '<table width="100%" cellspacing="0" cellpadding="6" border="1" style="border-color:#c9d6f0; '
        'border-style:solid; border-collapse:collapse; margin-top:4px; margin-bottom:6px">'
        f'<tr><td bgcolor="#e8effc"><span style="color:{MUTED}">Tool call</span>&nbsp; '
        f"<b style=\"font-family:'{mono_family()}'\">{html.escape(str(name))}</b></td></tr>"
        f'<tr><td bgcolor="#f6f9fe"><pre style="font-family:\'{mono_family()}\'; margin:0">'
        f"{html.escape(pretty_arguments(arguments))}</pre></td></tr></table>"
    )


def assistant_html(
    msg: dict, key: str, codes: list[str], *, expanded: bool = False, live_header: str | None = None
) -> str:
    """An assistant message. ``live_header``: the reply is still thinking (say this)."""
    content = msg.get("content", "")
    reasoning = msg.get("reasoning")
    if not isinstance(reasoning, str):  # not split by the engine: all of it is the answer
        reasoning = ""
    out = who_html("assistant")
    if live_header is not None:
        out += thinking_html(key, reasoning, live_header, expanded=True, live=True)
    elif reasoning.strip():
        out += thinking_html(key, reasoning, thought_header(msg.get("stats")), expanded=expanded)
    out += to_html(content, codes)
    calls = msg.get("calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, dict):
            out += call_card(call.get("name", "?"), call.get("arguments", ""))
    return out
