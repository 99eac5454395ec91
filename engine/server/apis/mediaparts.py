"""Each API's image and audio blocks as the conversation's media parts.

Every API front turns its body into OpenAI-shaped messages for the engine; the images and
audio in them become ``{"type": "media", "media": Media}`` parts
(:func:`engine.runtime.media.part`), checked by :mod:`engine.runtime.media.intake`, in
their place among the text parts (``{"type": "text", "text": ...}``). A message without
media keeps its text as a string, as before.

* chat completions: ``image_url`` (``{"url": ...}`` or a bare URL) and ``input_audio``
  (``{"data", "format"}``) parts, converted by :func:`chat_messages` before the body is
  parsed;
* Responses: ``input_image`` (:func:`input_image`), in messages and in
  ``function_call_output`` output lists;
* Anthropic Messages: ``image`` blocks with a base64 or URL ``source``
  (:func:`anthropic_image`), in user turns and in ``tool_result`` content;
* Ollama: ``images``, a list of base64 strings, each where the text says ``[img]`` and
  the rest before the text, as Ollama places them (:func:`ollama_content`).

A bad image is a 400 in the API's own shape (the route's path picks it), naming where it
is. Which URLs and files may be read is the endpoint's :class:`MediaPolicy`
(``ServerSettings.media_policy``). Runs on any thread; a URL fetch blocks, so the routes
parse bodies in the thread pool.
"""

from __future__ import annotations

from typing import Any

from engine.errors import InvalidRequestError
from engine.runtime.media import Media, part
from engine.runtime.media.intake import FORMATS, MediaPolicy, from_base64, from_image_url
from engine.server.errors import HTTPError
from engine.server.schemas import bad

#: chat completions' content parts that carry media
CHAT_MEDIA = ("image_url", "input_audio")
#: what a request's media may come from unless the endpoint allows more: its own bytes
BYTES_ONLY = MediaPolicy()


def _bad(e: InvalidRequestError) -> HTTPError:
    return bad(str(e), e.param)


def content(pieces: list[str | Media], joiner: str = "") -> str | list[dict]:
    """A message's content from its text and media in order: the text joined by
    ``joiner`` (empty pieces left out) when there is no media, else text and media parts
    (adjacent text joined into one part)."""
    if not any(isinstance(p, Media) for p in pieces):
        return joiner.join(p for p in pieces if p)
    out: list[dict] = []
    run: list[str] = []
    for p in pieces:
        if isinstance(p, Media):
            if run:
                out.append({"type": "text", "text": joiner.join(run)})
                run = []
            out.append(part(p))
        elif p:
            run.append(p)
    if run:
        out.append({"type": "text", "text": joiner.join(run)})
    return out


# ------------------------------------------------------------- chat completions
def chat_messages(messages: Any, policy: MediaPolicy = BYTES_ONLY) -> Any:
    """OpenAI chat ``messages`` with their ``image_url`` and ``input_audio`` parts as
    media parts (the other parts, and messages without media, as they were; anything
    not a list of messages is left to the parser's refusal)."""
    if not isinstance(messages, list):
        return messages
    out = None
    for i, m in enumerate(messages):
        parts = m.get("content") if isinstance(m, dict) else None
        if not isinstance(parts, list) or not any(isinstance(p, dict) and p.get("type") in CHAT_MEDIA for p in parts):
            continue
        out = out or list(messages)
        out[i] = {**m, "content": [_chat_part(p, f"messages[{i}].content[{j}]", policy) for j, p in enumerate(parts)]}
    return messages if out is None else out


def _chat_part(p: Any, where: str, policy: MediaPolicy) -> Any:
    kind = p.get("type") if isinstance(p, dict) else None
    try:
        if kind == "image_url":
            url = p.get("image_url")
            return part(from_image_url(url.get("url") if isinstance(url, dict) else url, f"{where}.image_url", policy))
        if kind == "input_audio":
            audio = p.get("input_audio")
            if not isinstance(audio, dict):
                raise bad(f"{where}.input_audio must be {{'data': <base64>, 'format': 'wav' | 'mp3'}}", where)
            fmt = audio.get("format")
            if fmt is not None and not FORMATS.get(fmt if isinstance(fmt, str) else "", "").startswith("audio/"):
                raise bad(f"{where}.input_audio.format must be 'wav' or 'mp3' (or 'flac'), not {fmt!r}", where)
            media = from_base64(
                audio.get("data"), f"{where}.input_audio.data", mime=fmt, kind="audio", max_bytes=policy.max_bytes
            )
            return part(media)
    except InvalidRequestError as e:
        raise _bad(e) from None
    return p


# -------------------------------------------------------------------- Responses
def input_image(p: dict, where: str, policy: MediaPolicy) -> Media:
    """A Responses ``input_image`` part: its ``image_url`` (a string or ``{"url"}``);
    a ``file_id`` is refused (this endpoint keeps no uploaded files)."""
    url = p.get("image_url")
    if url is None and p.get("file_id") is not None:
        raise bad(
            f"{where} names an uploaded file (file_id): this endpoint keeps no files; send the image itself in "
            "'image_url', as a data: URI (data:image/png;base64,...)",
            where,
        )
    try:
        return from_image_url(url.get("url") if isinstance(url, dict) else url, f"{where}.image_url", policy)
    except InvalidRequestError as e:
        raise _bad(e) from None


# ------------------------------------------------------------ Anthropic Messages
def anthropic_image(b: dict, where: str, policy: MediaPolicy) -> Media:
    """An Anthropic ``image`` block: ``source`` ``{"type": "base64", "media_type",
    "data"}`` or ``{"type": "url", "url"}`` (other sources, such as uploaded files, are
    refused in words, not dropped)."""
    src, at = b.get("source"), f"{where}.source"
    kind = src.get("type") if isinstance(src, dict) else None
    try:
        if kind == "base64":
            return from_base64(src.get("data"), f"{at}.data", mime=src.get("media_type"), max_bytes=policy.max_bytes)
        if kind == "url":
            return from_image_url(src.get("url"), f"{at}.url", policy)
    except InvalidRequestError as e:
        raise _bad(e) from None
    raise bad(
        f"{at} must be {{'type': 'base64', 'media_type': 'image/png', 'data': <base64>}} or "
        f"{{'type': 'url', 'url': ...}}{f', not of type {kind!r}' if kind else ''}: send the image's bytes as base64",
        at,
    )


# ----------------------------------------------------------------------- Ollama
def ollama_images(raw: Any, where: str, policy: MediaPolicy) -> list[Media]:
    """Ollama's ``images``: a list of base64-encoded images (None: none)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad(f"{where} must be a list of base64-encoded images", where)
    try:
        return [from_base64(x, f"{where}[{k}]", max_bytes=policy.max_bytes) for k, x in enumerate(raw)]
    except InvalidRequestError as e:
        raise _bad(e) from None


def ollama_content(text: Any, images: list[Media], where: str) -> Any:
    """A message's text (``where``) and its images where Ollama puts them: each in turn at
    the next ``[img]`` in the text, and those left over before the text (in order)."""
    if not images:
        return text
    if not isinstance(text, str):
        raise bad(f"{where} must be a string", where)
    segments = text.split("[img]", len(images))
    placed = len(segments) - 1
    pieces: list[str | Media] = [*images[placed:], segments[0]]
    for image, after in zip(images[:placed], segments[1:]):
        pieces += [image, after]
    return content(pieces)
