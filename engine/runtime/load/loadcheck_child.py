"""The child side of :mod:`engine.runtime.load.loadcheck`: load exactly as the app will,
decode a few tokens plain and with MTP, and print one JSON line per stage (so a crash
leaves the stage it died in on stdout). A typed refusal is reported as
``{"error": ...}`` with exit status 0; a crash is the parent's to diagnose.

``python -m engine.runtime.load.loadcheck_child PATH [--head H] --mtp SOURCE ...``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from engine.errors import MtpStudioError
from engine.runtime.load.loadcheck import CRASH_ENV
from engine.runtime.load.loader import LoadSpec, MtpSource, load

PROBE_TEXT = "The quick brown fox jumps over the lazy dog. def add(a, b):\n    return a + b\n"


def _say(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _maybe_crash(extra_bufts: bool) -> None:
    mode = os.environ.get(CRASH_ENV, "")
    if mode == "always" or (mode == "extra-bufts" and extra_bufts):
        os.kill(os.getpid(), signal.SIGSEGV)  # as ggml_backend_amx_mul_mat does on some Xeons


def _picture(lm) -> None:
    """A projector's first work, where it could abort: one tiny picture tokenized, encoded
    and decoded (plain, and with MTP where the model drafts)."""
    import struct
    import zlib

    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.media import Media
    from engine.runtime.media.projector import MARKER

    if os.environ.get(CRASH_ENV, "") == "picture":
        os.kill(os.getpid(), signal.SIGABRT)  # the test seam: as a projector libmtmd cannot run
    w = h = 32
    raw = b"".join(b"\0" + bytes((x * 7 + y * 3) % 256 for x in range(w * 3)) for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    media = lm.projector.prompt(f"Look: {MARKER} What is it?", [Media("image", png, "image/png", w, h)])
    prompt = lm.model.with_bos(media.tokens)
    depth = FixedDepth(1) if lm.session.draft is not None else None
    generate(lm.session, prompt, DecodeParams(max_tokens=2, ignore_eog=True, depth=depth, media=media.chunks))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.runtime.load.loadcheck_child")
    ap.add_argument("path")
    ap.add_argument("--head")
    ap.add_argument("--mtp", default="off", choices=[s.value for s in MtpSource])
    ap.add_argument("--gpu-layers", type=int, default=-1)
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--no-extra-bufts", action="store_true")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--mmproj")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr, format="%(message)s")
    extra = not a.no_extra_bufts

    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams

    from engine.runtime.decode.policy.base import FixedDepth

    _say(stage="load")
    try:
        lm = load(
            LoadSpec(
                a.path,
                head=a.head,
                mtp=MtpSource(a.mtp),
                n_ctx=256,
                max_draft_depth=a.depth,
                n_gpu_layers=a.gpu_layers,
                n_threads=a.threads,
                probe=False,
                extra_bufts=extra,
                exact=a.exact,
                # the parent judged memory (or the user chose Load anyway): a probe at
                # context 256 must not refuse again, nor refuse what the user overrode
                fit="off",
                mmproj=a.mmproj,
            )
        )
    except MtpStudioError as e:
        _say(stage="load", error=str(e))
        return 0
    try:
        _say(stage="decode")
        _maybe_crash(extra)
        prompt = lm.model.prompt_tokens(PROBE_TEXT)
        plain = generate(lm.session, prompt, DecodeParams(max_tokens=4, ignore_eog=True))
        drafted = None
        if lm.session.draft is not None:
            _say(stage="mtp")
            depth = max(1, lm.max_draft_depth)
            spec = generate(
                lm.session, prompt, DecodeParams(max_tokens=depth + 3, depth=FixedDepth(depth), ignore_eog=True)
            )
            drafted = spec.stats.drafted
        if lm.projector is not None:
            _say(stage="picture")
            _picture(lm)
        _say(stage="done", ok=True, tokens=len(plain.tokens), drafted=drafted)
    except MtpStudioError as e:
        _say(stage="decode", error=str(e))
    finally:
        lm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
