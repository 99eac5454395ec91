"""What a request sent as an image or audio clip, turned into a checked :class:`Media`.

Every API front (:mod:`engine.server.apis.mediaparts`) hands its media here as it came — a
``data:`` URI, bare base64 (llama-server takes it), an ``http(s)://`` URL, a ``file://``
URL — and gets a :class:`Media` back or an :class:`~engine.errors.InvalidRequestError`
that says where the media is (``messages[1].content[0].image_url``), what is wrong and
what to do. Nothing is decoded here: the type is sniffed from the first bytes, an
image's size read from its header, and a file cut short caught by its missing end
marker, so libmtmd's decoder (stb_image, miniaudio) is only given files that passed.
Only the types that decoder reads are taken: PNG, JPEG (baseline or progressive), GIF,
BMP; WAV, MP3, FLAC.

Which sources besides the request's own bytes may be read is the endpoint's
:class:`MediaPolicy` (URLs and files off unless set). Any thread; a URL fetch blocks for
up to ``url_timeout_s``, so the routes parse bodies off the event loop. Media bytes are
never logged nor put in a message.
"""

from __future__ import annotations

import base64
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import Literal, NoReturn

from engine.errors import InvalidRequestError
from engine.runtime.media import Media
from engine.runtime.media.sniff import check_audio, check_image, describe, name, sniff

#: most bytes one image or clip may have, decoded (a 4K screenshot PNG is 5-10 MB;
#: llama-server caps downloads at 10 MB; a request body is capped below this anyway)
MAX_MEDIA_BYTES = 20 << 20
#: longest side in pixels: stb_image decodes the whole image to memory before the
#: projector scales it to its own input (1-2 thousand pixels a side); past 8K a request
#: costs hundreds of MB for nothing the model sees
MAX_SIDE = 8192
#: most pixels (8K UHD, 7680 × 4320 ≈ 33 million): the decoded RGBA is about 133 MB
MAX_PIXELS = 7680 * 4320
#: most a long side may be of the short one: a projector scales a picture keeping its
#: shape, and one much longer than wide can reach past its position table (libmtmd
#: asserts, taking the process down: seen on a gemma4v projector with a 2000×10 picture)
MAX_ASPECT = 32
#: how much of a URL a message shows
_SHOWN = 120

Kind = Literal["image", "audio"]
#: formats named without a MIME type (OpenAI's ``input_audio.format``, file suffixes)
FORMATS = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "png": "image/png",
    "jpeg": "image/jpeg",
    "jpg": "image/jpeg",
    "gif": "image/gif",
    "bmp": "image/bmp",
}
_ACCEPTED = {
    "image": "images here are PNG, JPEG, GIF or BMP; convert it to PNG or JPEG",
    "audio": "audio here is WAV, MP3 or FLAC; convert it to WAV or MP3",
}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:")  # base64 has no ':'


@dataclass(frozen=True)
class MediaPolicy:
    """Where a request's media may come from besides its own bytes: the endpoint's
    settings (:attr:`engine.server.settings.ServerSettings.media_policy`)."""

    #: fetch ``http(s)://`` URLs (off: the server reaches no address a client names)
    allow_urls: bool = False
    #: ``file://`` URLs are read from under this folder only (None: none are)
    media_folder: Path | None = None
    max_bytes: int = MAX_MEDIA_BYTES
    #: the longest a URL fetch may take, all of it
    url_timeout_s: float = 10.0


def _refuse(where: str, what: str) -> NoReturn:
    raise InvalidRequestError(f"{where} {what}", param=where)


def _shown(url: str) -> str:
    return repr(url if len(url) <= _SHOWN else url[:_SHOWN] + "…")


# ------------------------------------------------------------------ sources
def from_image_url(url: str, where: str, policy: MediaPolicy) -> Media:
    """An image URL as the OpenAI APIs send it: a ``data:`` URI, bare base64, an
    ``http(s)://`` URL (``policy.allow_urls``) or a ``file://`` URL (under
    ``policy.media_folder``: an absolute path inside it, or a path relative to it)."""
    if not isinstance(url, str) or not url.strip():
        _refuse(where, "needs a URL: a data: URI (data:image/png;base64,...), base64, or an http(s):// URL")
    url = url.strip()
    head = url[:16].lower()
    if head.startswith("data:"):
        return _data_uri(url, where, "image", policy.max_bytes)
    if head.startswith(("http://", "https://")):
        return from_bytes(_fetch(url, where, policy), where, max_bytes=policy.max_bytes)
    if head.startswith("file:"):
        return from_bytes(_read_file(url, where, policy), where, max_bytes=policy.max_bytes)
    scheme = _SCHEME.match(url)
    if scheme:
        _refuse(
            where,
            f"is a {scheme.group(0)} URL: send the image as a data: URI (data:image/png;base64,...) or base64, "
            "or as an http(s):// or file:// URL where the endpoint allows them",
        )
    return from_base64(url, where, kind="image", max_bytes=policy.max_bytes)


def from_base64(
    data: str, where: str, *, mime: str | None = None, kind: Kind = "image", max_bytes: int = MAX_MEDIA_BYTES
) -> Media:
    """Base64 bytes (Anthropic's ``source.data``, Ollama's ``images``, OpenAI's
    ``input_audio.data``). ``mime``: what the request said they are (a MIME type or a
    format such as ``"wav"``); the bytes decide, but one of another kind is refused."""
    _declared(mime, kind, where)
    return from_bytes(_b64(data, where, max_bytes), where, kind=kind, max_bytes=max_bytes)


def from_bytes(
    data: bytes, where: str, *, kind: Kind = "image", mime: str | None = None, max_bytes: int = MAX_MEDIA_BYTES
) -> Media:
    """Bytes as a checked :class:`Media` of ``kind`` (the type sniffed, not taken from
    ``mime``; a declared ``mime`` of the other kind is refused)."""
    _declared(mime, kind, where)
    if not data:
        _refuse(where, f"is empty: send the {kind}'s bytes")
    if len(data) > max_bytes:
        _refuse(
            where, f"is {_mb(len(data))}, more than the {_mb(max_bytes)} a request's {kind} may be: make it smaller"
        )
    found = sniff(data)
    if found is None:
        what = describe(data)
        if what is None:
            a = "an image" if kind == "image" else "audio"
            _refuse(where, f"is not {a} of a type served here (its first bytes match none): {_ACCEPTED[kind]}")
        _refuse(where, f"is {what}, which the model's {kind} decoder cannot read: {_ACCEPTED[kind]}")
    if not found.startswith(kind + "/"):
        other = "an image part" if kind == "audio" else "an audio part (input_audio)"
        _refuse(where, f"is {name(found)}, not {'an image' if kind == 'image' else 'audio'}: send it as {other}")
    if kind == "audio":
        check_audio(data, found, where)
        return Media("audio", data, found)
    width, height = check_image(data, found, where)
    _size(width, height, where, found)
    return Media("image", data, found, width, height)


def _declared(mime: str | None, kind: Kind, where: str) -> None:
    """Refuse media declared as something of another kind (text, a PDF, audio for an
    image). A declared type of the right kind is not checked: the bytes decide."""
    if mime is None:
        return
    m = mime.strip().lower() if isinstance(mime, str) else ""
    m = FORMATS.get(m, m) if "/" not in m else m
    if "/" not in m:
        known = ", ".join(k for k, v in FORMATS.items() if v.startswith(kind))
        _refuse(where, f"says it is {mime!r}, not a known {kind} format: give one of {known}")
    if not m.startswith(kind + "/"):
        _refuse(
            where, f"says it is {m!r}, which is not {'an image' if kind == 'image' else 'audio'}: {_ACCEPTED[kind]}"
        )


def _b64(text: str, where: str, max_bytes: int) -> bytes:
    if not isinstance(text, str):
        _refuse(where, f"must be a base64 string, not {type(text).__name__}")
    s = text.strip()
    if "\n" in s or " " in s or "\r" in s or "\t" in s:  # MIME-style lines of base64
        s = "".join(s.split())
    if not s:
        _refuse(where, "is empty: send the file's bytes, base64-encoded")
    if len(s) // 4 * 3 > max_bytes + 3:
        _refuse(where, f"is about {_mb(len(s) // 4 * 3)}, more than the {_mb(max_bytes)} one may be: make it smaller")
    try:
        return base64.b64decode(s, validate=True)
    except ValueError as e:  # binascii.Error (bad digits, bad padding), non-ASCII text
        hint = ""
        if s[:5].lower() == "data:":
            hint = " (it is a data: URI: send the base64 after its comma alone)"
        elif "-" in s or "_" in s:
            hint = " (it uses the URL-safe alphabet: use '+' and '/' for '-' and '_')"
        _refuse(where, f"is not valid base64 ({e}){hint}: send the file's bytes base64-encoded, with '=' padding")


def _data_uri(url: str, where: str, kind: Kind, max_bytes: int) -> Media:
    comma = url.find(",", 0, 256)
    if comma < 0:
        _refuse(where, "is a data: URI without a comma: write it as data:image/png;base64,<base64>")
    params = [p.strip().lower() for p in url[5:comma].split(";")]
    if "base64" not in params[1:]:
        _refuse(where, "is a data: URI without ';base64': send the bytes base64-encoded (data:image/png;base64,...)")
    return from_base64(url[comma + 1 :], where, mime=params[0] or None, kind=kind, max_bytes=max_bytes)


class _HttpOnly(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) URLs only (urllib would also follow ftp:)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ("http", "https"):
            raise InvalidRequestError(f"was redirected to a {scheme}: URL, which is not fetched")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _fetch(url: str, where: str, policy: MediaPolicy) -> bytes:
    if not policy.allow_urls:
        _refuse(
            where,
            f"is the URL {_shown(url)}, and fetching URLs is off on this endpoint: send the image's bytes as a "
            "data: URI (data:image/png;base64,...), or turn on the endpoint's media URLs setting (media_urls; "
            "`mtp-studio serve --media-urls`)",
        )
    limit, deadline = policy.max_bytes, time.monotonic() + policy.url_timeout_s
    opener = urllib.request.build_opener(_HttpOnly)
    req = urllib.request.Request(url, headers={"User-Agent": "mtp-studio", "Accept": "image/*, audio/*"})
    chunks, n = [], 0
    try:
        with opener.open(req, timeout=policy.url_timeout_s) as resp:
            length = resp.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > limit:
                _refuse(where, f"({_shown(url)}) is {_mb(int(length))}, more than the {_mb(limit)} one may be")
            while chunk := resp.read1(1 << 16):  # what has come (read() waits for all of it)
                n += len(chunk)
                if n > limit:
                    _refuse(where, f"({_shown(url)}) is more than the {_mb(limit)} one may be: send a smaller image")
                if time.monotonic() > deadline:
                    raise TimeoutError
                chunks.append(chunk)
    except InvalidRequestError as e:
        if e.param is None:  # the redirect refusal
            _refuse(where, f"({_shown(url)}) {e}")
        raise
    except urllib.error.HTTPError as e:
        _refuse(where, f"could not be fetched: {_shown(url)} answered HTTP {e.code} {e.reason}")
    except (TimeoutError, urllib.error.URLError, HTTPException, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        if isinstance(reason, TimeoutError) or isinstance(e, TimeoutError):
            reason = f"it did not arrive within {policy.url_timeout_s:g} s"
        _refuse(where, f"could not be fetched from {_shown(url)} ({reason}): check the URL, or send the bytes")
    return b"".join(chunks)


def _read_file(url: str, where: str, policy: MediaPolicy) -> bytes:
    if policy.media_folder is None:
        _refuse(
            where,
            f"is the file URL {_shown(url)}, and reading files is off on this endpoint: send the bytes as a data: "
            "URI, or set the endpoint's media folder (media_folder; `mtp-studio serve --media-path DIR`) and put "
            "the file under it",
        )
    rest = url[5:].removeprefix("//")
    if rest.lower().startswith("localhost/"):
        rest = rest[len("localhost") :]
    folder = policy.media_folder.resolve()
    # file:///abs/path, or llama-server's file://name relative to the media folder
    if rest.startswith("/"):
        path = Path(urllib.request.url2pathname(rest))
    else:
        path = folder / urllib.parse.unquote(rest)
    real = path.resolve()
    if not real.is_relative_to(folder):
        _refuse(where, f"({_shown(url)}) is outside the endpoint's media folder: only files under it may be read")
    try:
        if not real.is_file():
            _refuse(where, f"({_shown(url)}) names no file in the endpoint's media folder")
        size = real.stat().st_size
        if size > policy.max_bytes:
            _refuse(where, f"({_shown(url)}) is {_mb(size)}, more than the {_mb(policy.max_bytes)} one may be")
        return real.read_bytes()
    except OSError as e:
        _refuse(where, f"({_shown(url)}) could not be read ({e.strerror})")


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MB"


def _size(width: int, height: int, where: str, mime: str) -> None:
    if width <= 0 or height <= 0:
        _refuse(where, f"is {name(mime)} of {width}×{height} pixels: its header is damaged; send the image again")
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
        _refuse(
            where,
            f"is {width}×{height} pixels, more than this endpoint takes (at most {MAX_SIDE} a side and "
            f"{MAX_PIXELS / 1e6:.0f} million pixels): scale it down (the model sees it smaller still)",
        )
    if max(width, height) > MAX_ASPECT * min(width, height):
        _refuse(
            where,
            f"is {width}×{height} pixels, more than {MAX_ASPECT} times longer than it is wide: crop it or cut it into "
            "pieces and send those",
        )
