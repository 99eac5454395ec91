"""Markdown to rich-text HTML for the chat transcript (a QTextBrowser).

Prose goes through Qt's own Markdown reader (GitHub dialect) with raw HTML off, so a
reply's ``<b>`` or ``<script>`` shows as text, never as markup. Fenced code blocks are
cut out first and drawn here: monospace, with a "Copy" link ``copy:N`` whose code is
``codes[N]`` (the caller's list, filled as blocks are met). A fence left open (a reply
still streaming) runs to the end of the text.
"""

from __future__ import annotations

import html
import re

from PySide6.QtGui import QFontDatabase, QTextDocument

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S)
_MD = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML
# Qt's heading sizes are meant for documents; a chat reply's are a notch smaller
_SIZES = (("xx-large", "x-large"), ("x-large", "large"), ("large", "medium"))

CODE_BG, CODE_HEAD, CODE_BORDER = "#f3f5f9", "#e6e9f0", "#dde1ea"


def mono_family() -> str:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()


def blocks(text: str) -> list[tuple[str, str, str]]:
    """The text as ("prose", "", text) and ("code", language, code) pieces, in order."""
    out: list[tuple[str, str, str]] = []
    prose: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
            prose.append(lines[i])
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).strip().split(" ")[0]
        code: list[str] = []
        i += 1
        while i < len(lines):
            end = lines[i].strip()
            if end.startswith(fence[0] * len(fence)) and not end.strip(fence[0]):
                i += 1
                break
            code.append(lines[i])
            i += 1
        if prose:
            out.append(("prose", "", "\n".join(prose)))
            prose = []
        out.append(("code", lang, "\n".join(code)))
    if prose:
        out.append(("prose", "", "\n".join(prose)))
    return out


def prose_html(text: str) -> str:
    """Markdown prose (no fences) as HTML body content; raw HTML in it stays text."""
    if not text.strip():
        return ""
    doc = QTextDocument()
    doc.setMarkdown(text, _MD)
    m = _BODY.search(doc.toHtml())
    body = m.group(1) if m else html.escape(text)
    for big, smaller in _SIZES:
        body = body.replace(f"font-size:{big};", f"font-size:{smaller};")
    return body


def code_html(code: str, lang: str, index: int) -> str:
    label = html.escape(lang) if lang else "code"
    return (
        f'<table width="100%" cellspacing="0" cellpadding="6" border="1" style="border-color:{CODE_BORDER}; '
        f'border-style:solid; border-collapse:collapse; margin-top:4px; margin-bottom:6px">'
        f'<tr><td bgcolor="{CODE_HEAD}"><table width="100%" cellspacing="0" cellpadding="0"><tr>'
        f'<td><span style="color:#6b7385; font-size:11px">{label}</span></td>'
        f'<td align="right"><a href="copy:{index}" style="color:#3d7bf0; text-decoration:none; font-size:11px">'
        f"Copy</a></td></tr></table></td></tr>"
        f'<tr><td bgcolor="{CODE_BG}"><pre style="font-family:\'{mono_family()}\'; margin:0">'
        f"{html.escape(code)}</pre></td></tr></table>"
    )


def to_html(text: str, codes: list[str]) -> str:
    """``text`` (Markdown) as HTML; each code block's text is appended to ``codes`` and
    its Copy link is ``copy:<its index there>``."""
    out = []
    for kind, lang, body in blocks(text):
        if kind == "prose":
            out.append(prose_html(body))
        else:
            codes.append(body)
            out.append(code_html(body, lang, len(codes) - 1))
    return "".join(out)
