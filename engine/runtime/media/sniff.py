"""What media bytes are, told from their first bytes and headers, without decoding them.

:func:`sniff` names the type by its magic bytes among those libmtmd's decoder reads (stb_image:
PNG, JPEG, GIF, BMP; miniaudio: WAV, MP3, FLAC); :func:`describe` says in words what other
bytes are (a WEBP or HEIC image, an SVG drawing, HTML); :func:`check_image` reads an image's
width and height from its header and refuses one cut short (PNG: no IEND chunk; JPEG: no
EOI marker; GIF: no trailer; BMP: fewer pixels than the header says) or one the decoder
cannot read (arithmetic-coded JPEG, RLE BMP); :func:`check_audio` does the same for audio.
Used by :mod:`engine.runtime.media.intake`; pure Python, any thread.
"""

from __future__ import annotations

import struct
import zlib
from typing import NoReturn

from engine.errors import InvalidRequestError

#: how far before a file's end its end marker may sit (some writers pad after it)
TAIL = 1024
#: the types served, by name
NAMES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/bmp": "BMP"} | {
    "audio/wav": "WAV",
    "audio/mpeg": "MP3",
    "audio/flac": "FLAC",
}
#: (first bytes, where they are, MIME type) of the types served
_SERVED = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WAVE", 8, "audio/wav"),
    (b"fLaC", 0, "audio/flac"),
    (b"ID3", 0, "audio/mpeg"),
)
#: (first bytes, where they are, what it is) of files the decoder cannot read
_OTHERS = (
    (b"WEBP", 8, "a WEBP image"),
    (b"II*\x00", 0, "a TIFF image"),
    (b"MM\x00*", 0, "a TIFF image"),
    (b"ftypavi", 4, "an AVIF image"),
    *((b"ftyp" + brand, 4, "a HEIC image") for brand in (b"heic", b"heix", b"hevc", b"mif1", b"msf1")),
    (b"ftyp", 4, "an MP4 or MOV file"),
    (b"8BPS", 0, "a Photoshop (PSD) file"),
    (b"\x00\x00\x01\x00", 0, "an ICO icon"),
    (b"%PDF", 0, "a PDF document"),
    (b"\xff\x0a", 0, "a JPEG XL image"),
    (b"JXL ", 4, "a JPEG XL image"),
    (b"OggS", 0, "an Ogg (Vorbis or Opus) file"),
)


def sniff(data: bytes) -> str | None:
    """The MIME type of the image or audio ``data`` holds, by its first bytes, among those
    served (None: none of them)."""
    for magic, at, mime in _SERVED:
        if data[at : at + len(magic)] == magic:
            return mime
    if data[:2] == b"BM" and len(data) >= 18:  # two letters: a BMP's header must follow
        return "image/bmp"
    if len(data) > 1 and data[0] == 0xFF and data[1] & 0xE6 in (0xE2, 0xE4, 0xE6):
        return "audio/mpeg"  # an MPEG audio frame's sync word, with a layer set
    return None


def describe(data: bytes) -> str | None:
    """What ``data`` is, in words, when it is none of the served types (None: not known)."""
    for magic, at, what in _OTHERS:
        if data[at : at + len(magic)] == magic:
            return what
    text = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"<"):
        return "an SVG drawing (text)" if b"<svg" in text.lower() else "HTML or XML text"
    return None


def name(mime: str) -> str:
    """A served ``mime`` in words, with its article: "a PNG image", "an MP3 clip"."""
    word = NAMES[mime]
    article = "an" if word == "MP3" else "a"  # as the names are said: "em-pee-three", "flack"
    return f"{article} {word} {'image' if mime.startswith('image/') else 'clip'}"


def check_image(data: bytes, mime: str, where: str) -> tuple[int, int]:
    """The width and height in the header of the image ``data`` (of the served type
    ``mime``); an InvalidRequestError naming ``where`` when it is cut short or damaged."""
    return _IMAGE_CHECKS[mime](data, where)


def check_audio(data: bytes, mime: str, where: str) -> None:
    """Refuse the audio ``data`` (of the served type ``mime``) when it is cut short."""
    _AUDIO_CHECKS[mime](data, where)


def _refuse(where: str, what: str) -> NoReturn:
    raise InvalidRequestError(f"{where} {what}", param=where)


def _cut(where: str, what: str) -> NoReturn:
    _refuse(where, f"is {what}: send the whole file again, or save it again (as PNG or JPEG for an image)")


def _png(d: bytes, where: str) -> tuple[int, int]:
    if len(d) < 45 or d[8:16] != b"\x00\x00\x00\x0dIHDR" or zlib.crc32(d[12:29]) != struct.unpack(">I", d[29:33])[0]:
        _cut(where, "a PNG whose header (IHDR) is damaged")
    width, height, depth, color = struct.unpack(">IIBB", d[16:26])
    if color not in (0, 2, 3, 4, 6) or depth not in (1, 2, 4, 8, 16):
        _cut(where, "a PNG whose header (IHDR) is damaged")
    if d.rfind(b"\x00\x00\x00\x00IEND", max(0, len(d) - TAIL)) < 0:
        _cut(where, "a PNG cut short (it has no end chunk, IEND)")
    return width, height


#: JPEG frame headers stb_image reads: baseline, extended and progressive Huffman
_JPEG_OK = (0xC0, 0xC1, 0xC2)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(d: bytes, where: str) -> tuple[int, int]:
    i, n = 2, len(d)
    while i + 4 <= n:
        if d[i] != 0xFF:
            break
        marker = d[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # the end or the image data before any frame header
            break
        if marker in _JPEG_SOF and i + 9 <= n:
            if marker not in _JPEG_OK or d[i + 4] != 8:
                _refuse(
                    where,
                    "is a lossless, arithmetic-coded or 12-bit JPEG, which the model's image decoder cannot read: "
                    "convert it to PNG or to a baseline JPEG",
                )
            if d.rfind(b"\xff\xd9", max(0, n - TAIL)) < 0:
                _cut(where, "a JPEG cut short (it has no end marker, EOI)")
            height, width = struct.unpack(">HH", d[i + 5 : i + 9])
            return width, height
        i += 2 + ((d[i + 2] << 8) | d[i + 3])
    _cut(where, "a JPEG without a frame header (SOF): damaged or cut short")


def _gif(d: bytes, where: str) -> tuple[int, int]:
    if len(d) < 14 or not d[-TAIL:].rstrip(b"\x00").endswith(b"\x3b"):
        _cut(where, "a GIF cut short (it has no trailer)")
    return struct.unpack("<HH", d[6:10])


def _bmp(d: bytes, where: str) -> tuple[int, int]:
    offset, header = struct.unpack("<II", d[10:18])
    if header == 12 and len(d) >= 26:
        width, height, _, bpp = struct.unpack("<HHHH", d[18:26])
        compression = 0
    elif header >= 40 and len(d) >= 34:
        width, height, _, bpp, compression = struct.unpack("<iiHHI", d[18:34])
        height = abs(height)  # negative: rows top-down
    else:
        _cut(where, "a BMP whose header is damaged")
    if bpp not in (1, 4, 8, 16, 24, 32):
        _cut(where, "a BMP whose header is damaged")
    if compression not in (0, 3, 6):
        _refuse(
            where,
            "is a compressed (RLE, JPEG or PNG) BMP, which the model's image decoder cannot read: convert it to PNG",
        )
    if len(d) < offset + (bpp * width + 31) // 32 * 4 * height:
        _cut(where, "a BMP cut short (fewer pixels than its header says)")
    return width, height


def _wav(d: bytes, where: str) -> None:
    i, seen = 12, set()
    while i + 8 <= len(d) and "data" not in seen:
        cid, size = d[i : i + 4], struct.unpack("<I", d[i + 4 : i + 8])[0]
        seen.add(cid.decode("latin-1"))
        i += 8 + size + (size & 1)
    if "fmt " not in seen or "data" not in seen:
        _cut(where, "a WAV file without its format or data chunk: damaged or cut short")


def _mp3(d: bytes, where: str) -> None:
    if d.startswith(b"ID3"):  # the tag's size is 4 × 7 bits; audio frames follow it
        size = 10 + sum((b & 0x7F) << (7 * (3 - k)) for k, b in enumerate(d[6:10]))
        if len(d) <= size + 4:
            _cut(where, "an MP3 file with no audio after its tag: cut short")


def _flac(d: bytes, where: str) -> None:
    if len(d) < 42 or d[4] & 0x7F != 0:  # STREAMINFO first
        _cut(where, "a FLAC file whose header (STREAMINFO) is damaged")


_IMAGE_CHECKS = {"image/png": _png, "image/jpeg": _jpeg, "image/gif": _gif, "image/bmp": _bmp}
_AUDIO_CHECKS = {"audio/wav": _wav, "audio/mpeg": _mp3, "audio/flac": _flac}
