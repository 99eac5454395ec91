"""Small images for the multimodal tests, encoded in memory: random-pixel PNGs and JPEGs
(:func:`png_bytes`, :func:`jpeg_bytes`), GIFs and BMPs (:func:`gif_bytes`,
:func:`bmp_bytes`), and broken files that a decoder must refuse (:func:`truncated_png`,
:func:`corrupt_png`).

The PNG, GIF and BMP writers are this module's own (zlib and struct, no Pillow), so their
bytes depend only on the arguments; JPEGs come from Pillow. Used by the projector fixtures'
checks (:mod:`tests.synth.projector`) and the media tests.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np


def pixels(width: int, height: int, seed: int = 0) -> np.ndarray:
    """``height × width × 3`` random RGB bytes: a smooth gradient plus noise, so that two
    seeds give clearly different images and a JPEG of them still differs."""
    if width <= 0 or height <= 0:
        raise ValueError(f"an image needs a positive size, not {width}x{height}")
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 255 // max(width + height - 2, 1)],
        axis=-1,
    )
    shift = rng.integers(0, 256, size=3)
    noise = rng.integers(-40, 41, size=(height, width, 3))
    return ((base + shift + noise) % 256).astype(np.uint8)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``rgb`` (height × width × 3 uint8), filter 0 on every row."""
    height, width, channels = rgb.shape
    if channels != 3:
        raise ValueError(f"expected RGB pixels, got {channels} channels")
    rows = b"".join(b"\x00" + rgb[r].tobytes() for r in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, 9)) + _chunk(b"IEND", b"")
    )


def png_bytes(width: int, height: int, seed: int = 0) -> bytes:
    """A ``width × height`` RGB PNG of random pixels (same arguments, same bytes)."""
    return encode_png(pixels(width, height, seed))


def jpeg_bytes(width: int, height: int, seed: int = 0, quality: int = 90) -> bytes:
    """A ``width × height`` baseline JPEG of the same pixels as :func:`png_bytes` (Pillow)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels(width, height, seed), "RGB").save(out, format="JPEG", quality=quality)
    return out.getvalue()


def truncated_png(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    """A PNG cut off in the middle of its image data: the signature and header are fine,
    the pixels are not all there and there is no end chunk."""
    whole = png_bytes(width, height, seed)
    idat = whole.index(b"IDAT")
    return whole[: idat + 4 + (len(whole) - idat) // 3]


def corrupt_png(width: int = 32, height: int = 32, seed: int = 0) -> bytes:
    """A PNG of the right length whose compressed image data is garbage (checksums
    recomputed, so only decoding the data finds the fault)."""
    rows = b"\x00" * 7 + bytes(range(256)) * ((width * height * 3) // 256 + 1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", rows) + _chunk(b"IEND", b"")


def gif_bytes(width: int, height: int, seed: int = 0) -> bytes:
    """A ``width × height`` GIF of the same pixels in 256 grays (this module's own
    encoder: each pixel its own LZW code after a clear code, so the code width never
    grows; large, but any decoder reads it)."""
    gray = pixels(width, height, seed).mean(axis=2).astype(np.uint8).ravel()
    clear, end, bits, acc, nbits = 256, 257, 9, 0, 0
    out = bytearray()
    for code in [c for p in gray for c in (clear, int(p))] + [end]:
        acc |= code << nbits
        nbits += bits
        while nbits >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nbits -= 8
    if nbits:
        out.append(acc & 0xFF)
    blocks = b"".join(bytes([len(out[i : i + 255])]) + out[i : i + 255] for i in range(0, len(out), 255))
    palette = bytes(v for g in range(256) for v in (g, g, g))
    screen = struct.pack("<HHBBB", width, height, 0xF7, 0, 0)  # global table of 256 colours
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0)
    return b"GIF89a" + screen + palette + image + b"\x08" + blocks + b"\x00\x3b"


def bmp_bytes(width: int, height: int, seed: int = 0) -> bytes:
    """A ``width × height`` 24-bit BMP of the same pixels as :func:`png_bytes` (rows
    bottom-up, blue-green-red, each padded to 4 bytes)."""
    rgb = pixels(width, height, seed)
    pad = b"\x00" * (-width * 3 % 4)
    rows = b"".join(rgb[r, :, ::-1].tobytes() + pad for r in range(height - 1, -1, -1))
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(info) + len(rows), 0, 0, 14 + len(info)) + info + rows
