"""Media intake (engine.runtime.media.intake, .sniff) on real bytes: what each API sends
becomes a checked Media, and every bad input is refused in words that name its place."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import wave
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.errors import InvalidRequestError
from engine.runtime.media.intake import MAX_PIXELS, MediaPolicy, from_base64, from_bytes, from_image_url
from tests.synth.images import bmp_bytes, corrupt_png, gif_bytes, jpeg_bytes, png_bytes, truncated_png

WHERE = "messages[1].content[0].image_url"
OFF = MediaPolicy()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refused(fn, *args, **kw) -> str:
    """The message of the InvalidRequestError ``fn`` raises (it must name its place)."""
    with pytest.raises(InvalidRequestError) as e:
        fn(*args, **kw)
    where = args[1]
    assert str(e.value).startswith(where) and e.value.param == where, str(e.value)
    return str(e.value)


def png_header(width: int, height: int) -> bytes:
    """A PNG that is all header: a valid IHDR claiming ``width × height``, no pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def wav_bytes(frames: int = 800) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x01" * frames)
    return out.getvalue()


# ------------------------------------------------------------------ accepted
@pytest.mark.parametrize(
    "make,mime",
    [(png_bytes, "image/png"), (jpeg_bytes, "image/jpeg"), (gif_bytes, "image/gif"), (bmp_bytes, "image/bmp")],
)
def test_each_image_type_arrives_whole_with_its_size_from_every_encoding(make, mime):
    data = make(21, 13, 5)
    for got in (
        from_bytes(data, WHERE),
        from_base64(b64(data), WHERE),
        from_image_url(f"data:{mime};base64,{b64(data)}", WHERE, OFF),
        from_image_url(b64(data), WHERE, OFF),  # bare base64, as llama-server takes it
    ):
        assert (got.kind, got.mime, got.width, got.height) == ("image", mime, 21, 13)
        assert got.data == data
    assert "data" not in repr(got) and b64(data)[:20] not in repr(got)


def test_the_bytes_decide_the_type_and_base64_may_come_in_lines():
    jpeg = jpeg_bytes(8, 8)
    lines = "\n".join(b64(jpeg)[i : i + 76] for i in range(0, len(b64(jpeg)), 76))
    got = from_image_url(f"data:image/png;base64,{lines}", WHERE, OFF)  # says PNG, is a JPEG
    assert got.mime == "image/jpeg" and got.data == jpeg


def test_a_damaged_png_whose_header_is_sound_passes_to_the_decoder():
    """Only decoding finds garbage pixel data; the intake checks headers and ends."""
    assert from_bytes(corrupt_png(), WHERE).mime == "image/png"


def test_audio_wav_mp3_flac():
    wav = wav_bytes()
    got = from_base64(b64(wav), "messages[0].content[0].input_audio.data", mime="wav", kind="audio")
    assert (got.kind, got.mime, got.data) == ("audio", "audio/wav", wav)
    mp3 = b"\xff\xfb\x90\x64" + bytes(413)  # one MPEG-1 layer III frame header
    assert from_bytes(mp3, WHERE, kind="audio").mime == "audio/mpeg"
    tagged = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + mp3
    assert from_bytes(tagged, WHERE, kind="audio", mime="audio/mpeg").mime == "audio/mpeg"
    flac = b"fLaC\x80\x00\x00\x22" + bytes(34) + bytes(100)
    assert from_bytes(flac, WHERE, kind="audio").mime == "audio/flac"


# ------------------------------------------------------------------ refused
def test_bad_base64_and_empty_data_are_refused_in_words_without_the_data():
    secret = "QUJD" * 10 + "$$$"
    said = refused(from_base64, secret, WHERE)
    assert "not valid base64" in said and secret not in said
    assert "not valid base64" in refused(from_base64, b64(png_bytes(4, 4))[:-2], WHERE)  # padding cut off
    assert "URL-safe" in refused(from_base64, "ab-_" * 4, WHERE)
    assert "after its comma" in refused(from_base64, "data:image/png;base64,AAAA$", WHERE)
    assert "is empty" in refused(from_base64, "  ", WHERE)
    assert "is empty" in refused(from_image_url, "data:image/png;base64,", WHERE, OFF)
    assert "is empty" in refused(from_bytes, b"", WHERE)
    assert "must be a base64 string" in refused(from_base64, 5, WHERE)
    assert "needs a URL" in refused(from_image_url, None, WHERE, OFF)
    assert "without ';base64'" in refused(from_image_url, "data:image/svg+xml,<svg/>", WHERE, OFF)


def test_media_over_the_size_limit_is_refused_before_decoding():
    small = MediaPolicy(max_bytes=1000)
    data = png_bytes(64, 64)
    assert len(data) > 1000
    assert "more than the 0.0 MB" in refused(from_image_url, b64(data), WHERE, small)
    assert "more than" in refused(from_bytes, data, WHERE, max_bytes=1000)


@pytest.mark.parametrize(
    "data,said",
    [
        (truncated_png(), "PNG cut short (it has no end chunk, IEND)"),
        (png_bytes(8, 8)[:17] + b"\x55" + png_bytes(8, 8)[18:], "PNG whose header (IHDR) is damaged"),
        (jpeg_bytes(16, 16)[:-40], "JPEG cut short (it has no end marker, EOI)"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF" + bytes(10), "JPEG without a frame header"),
        (gif_bytes(8, 8)[:-1], "GIF cut short"),
        (bmp_bytes(8, 8)[:-10], "BMP cut short"),
        (bmp_bytes(8, 8)[:30] + struct.pack("<I", 1) + bmp_bytes(8, 8)[34:], "compressed (RLE, JPEG or PNG) BMP"),
        (bmp_bytes(8, 8)[:18] + struct.pack("<i", 0) + bmp_bytes(8, 8)[22:], "0×8 pixels: its header is damaged"),
        (png_header(9000, 10), "9000×10 pixels, more than this endpoint takes"),
        (png_header(6000, 6000), f"{MAX_PIXELS / 1e6:.0f} million pixels"),
        (png_header(0, 10), "0×10 pixels"),
        (png_bytes(660, 20), "660×20 pixels, more than 32 times longer than it is wide"),
    ],
)
def test_images_cut_short_damaged_or_too_large_are_refused(data, said):
    assert said in refused(from_image_url, b64(data), WHERE, OFF)


def test_a_jpeg_the_decoder_cannot_read_is_refused():
    data = bytearray(jpeg_bytes(16, 16))
    sof = data.index(b"\xff\xc0")
    data[sof + 1] = 0xC3  # lossless
    assert "lossless, arithmetic-coded or 12-bit JPEG" in refused(from_bytes, bytes(data), WHERE)


def _pil(fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4)).save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    "make,what",
    [
        (lambda: _pil("WEBP"), "a WEBP image"),
        (lambda: _pil("TIFF"), "a TIFF image"),
        (lambda: b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64), "a HEIC image"),
        (lambda: b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>', "an SVG drawing"),
        (lambda: b"<!doctype html><html>login</html>", "HTML or XML text"),
        (lambda: b"%PDF-1.7\n" + bytes(40), "a PDF document"),
    ],
)
def test_other_image_types_are_refused_with_the_accepted_list(make, what):
    said = refused(from_base64, b64(make()), WHERE, mime="image/png")
    assert f"is {what}" in said and "PNG, JPEG, GIF or BMP" in said and "convert it to PNG or JPEG" in said


def test_unknown_bytes_and_the_wrong_kind_are_refused():
    assert "is not an image of a type served" in refused(from_bytes, b"just some words", WHERE)
    assert "is a WAV clip, not an image: send it as an audio part" in refused(from_bytes, wav_bytes(), WHERE)
    audio = "messages[0].content[1].input_audio.data"
    assert "is a PNG image, not audio" in refused(from_base64, b64(png_bytes(4, 4)), audio, kind="audio")
    assert "WAV file without its format or data chunk" in refused(from_bytes, wav_bytes()[:30], audio, kind="audio")


def test_a_declared_type_of_another_kind_is_refused_even_when_the_bytes_are_an_image():
    png = b64(png_bytes(4, 4))
    assert "says it is 'text/plain', which is not an image" in refused(
        from_image_url, f"data:text/plain;base64,{png}", WHERE, OFF
    )
    assert "'audio/wav', which is not an image" in refused(from_image_url, f"data:audio/wav;base64,{png}", WHERE, OFF)
    assert "'application/pdf'" in refused(from_base64, png, WHERE, mime="application/pdf")
    assert "not a known audio format: give one of wav, mp3, flac" in refused(
        from_base64, b64(wav_bytes()), WHERE, mime="ogg", kind="audio"
    )


def test_other_url_schemes_are_refused():
    assert "is a ftp: URL" in refused(from_image_url, "ftp://example.com/cat.png", WHERE, OFF)


# ------------------------------------------------------------------ files
def test_file_urls_need_the_media_folder_and_stay_inside_it(tmp_path):
    folder, outside = tmp_path / "media", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    png = png_bytes(6, 5)
    (folder / "sub").mkdir()
    (folder / "sub" / "a cat.png").write_bytes(png)
    (outside / "secret.png").write_bytes(png)
    (folder / "link.png").symlink_to(outside / "secret.png")
    policy = MediaPolicy(media_folder=folder)
    inside = (folder / "sub" / "a cat.png").as_uri()

    said = refused(from_image_url, inside, WHERE, OFF)
    assert "reading files is off" in said and "media_folder" in said and "--media-path" in said
    assert from_image_url(inside, WHERE, policy).data == png
    assert from_image_url("file://sub/a%20cat.png", WHERE, policy).data == png  # llama-server's relative form
    for escape in ((outside / "secret.png").as_uri(), "file://../elsewhere/secret.png", (folder / "link.png").as_uri()):
        said = refused(from_image_url, escape, WHERE, policy)
        assert "outside the endpoint's media folder" in said and str(folder) not in said.replace(escape, "")
    assert "names no file" in refused(from_image_url, (folder / "nope.png").as_uri(), WHERE, policy)
    assert "names no file" in refused(from_image_url, folder.as_uri(), WHERE, policy)
    (folder / "cut.png").write_bytes(truncated_png())
    assert "cut short" in refused(from_image_url, (folder / "cut.png").as_uri(), WHERE, policy)


# ------------------------------------------------------------------ URLs
class _Images(BaseHTTPRequestHandler):
    """A local web server's answers: an image, a large one sent without a length, a
    redirect to another scheme, a 404, and one that answers too slowly."""

    png = png_bytes(7, 3)

    def do_GET(self):
        if self.path == "/cat.png":
            self._send(200, self.png, length=True)
        elif self.path == "/big":
            self._send(200, self.png + bytes(5000), length=False)
        elif self.path == "/to-ftp":
            self.send_response(302)
            self.send_header("Location", "ftp://example.com/cat.png")
            self.end_headers()
        elif self.path == "/to-cat":
            self.send_response(301)
            self.send_header("Location", "/cat.png")
            self.end_headers()
        elif self.path == "/slow":
            self.send_response(200)
            self.end_headers()
            for _ in range(20):
                self.wfile.write(self.png[:8])
                self.wfile.flush()
                time.sleep(0.1)
        else:
            self._send(404, b"no", length=True)

    def _send(self, status: int, body: bytes, *, length: bool):
        self.send_response(status)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def web():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_http_urls_are_refused_unless_turned_on(web):
    said = refused(from_image_url, f"{web}/cat.png", WHERE, OFF)
    assert "fetching URLs is off" in said and "media_urls" in said and "--media-urls" in said


def test_http_urls_are_fetched_when_on_within_the_size_and_time_caps(web):
    on = MediaPolicy(allow_urls=True, max_bytes=2000, url_timeout_s=0.5)
    got = from_image_url(f"{web}/cat.png", WHERE, on)
    assert (got.mime, got.width, got.height, got.data) == ("image/png", 7, 3, _Images.png)
    assert from_image_url(f"{web}/to-cat", WHERE, on).data == _Images.png
    assert "more than the" in refused(from_image_url, f"{web}/big", WHERE, on)
    assert "more than the" in refused(
        from_image_url, f"{web}/cat.png", WHERE, MediaPolicy(allow_urls=True, max_bytes=50)
    )
    assert "redirected to a ftp: URL" in refused(from_image_url, f"{web}/to-ftp", WHERE, on)
    assert "HTTP 404" in refused(from_image_url, f"{web}/missing.png", WHERE, on)
    t0 = time.monotonic()
    assert "did not arrive within 0.5 s" in refused(from_image_url, f"{web}/slow", WHERE, on)
    assert time.monotonic() - t0 < 1.5
