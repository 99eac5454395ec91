"""``mtp-studio bench images``: a prompt with a picture, with MTP drafting through it.

For each model (the demo, and any ``--model``) a tiny projector of the width the model
takes is written (random weights: ``tests.synth.projector``, cached under
``~/.cache/mtp-studio-bench``), and one picture of 192 rows (256×192) is asked about:

* **in process**: time to the first token of the first turn and of the next one (the same
  picture: its rows come from the contexts, its embeddings from the projector's cache);
  MTP acceptance over the first ``--tokens`` tokens after the picture at a fixed depth,
  with the head fed the picture's rows (MTP Studio's way) and with them left as holes
  (llama-server's draft-mtp skips image batches); decode tok/s with MTP auto and off;
* **over HTTP**, where ``--llama-server`` is given: the same picture as a data URI in a
  streamed chat completion to ours and to llama-server ``--mmproj`` (with draft-mtp and
  without): first-turn and next-turn time to first token, and decode tok/s.

Prints one JSON object per model.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

from benchmarks.serving.servers import (
    ServerError,
    ServerProcess,
    add_llama_server_args,
    find_llama_server,
    timed_stream,
)
from engine.cli import EXIT_INVALID, die
from engine.runtime import jobs as J
from engine.runtime.decider import INTERACTIVE
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from engine.runtime.media import Media, part
from tests.synth.images import png_bytes
from tests.synth.projector import write_projector

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo.gguf"
CACHE = Path.home() / ".cache" / "mtp-studio-bench"
QUESTION = "Describe this picture in detail."


def projector_for(model: Path) -> Path:
    """A tiny random qwen3vl_merger projector as wide as ``model``'s input (cached)."""
    from engine.gguf.projector import n_embd_inp
    from engine.gguf.reader import read_header

    width = n_embd_inp(read_header(model))
    path = CACHE / f"mmproj-{model.stem}-{width}.gguf"
    if not path.is_file():
        write_projector(path, "qwen3vl_merger", width)
    return path


def picture(seed: int = 1) -> Media:
    return Media("image", png_bytes(256, 192, seed), "image/png", 256, 192)


def turns(m: Media, reply: str = "") -> tuple[list[dict], list[dict]]:
    first = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, part(m)]}]
    second = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "What else do you see?"}]
    return first, second


def first_token_ms(engine: Engine, job: J.Generate) -> tuple[float, J.GenerateResult]:
    t0 = time.perf_counter()
    h = engine.submit(job)
    ttft = None
    for ev in h.events():
        if isinstance(ev, J.Tokens) and ttft is None:
            ttft = (time.perf_counter() - t0) * 1000
    return ttft or 0.0, h.result()


def in_process(model: Path, mmproj: Path, tokens: int, rounds: int) -> dict:
    out: dict = {}
    # no prompt cache: a snapshot would bring the MTP context back as the other arm left it
    with Engine(EngineConfig(request=INTERACTIVE, prompt_cache_mb=0)) as e:  # as `serve` has it
        e.submit(J.LoadModel(LoadSpec(model, n_ctx=2048, probe=False, fit="off", mmproj=mmproj))).result()
        (lm,) = e._state.models.values()  # the seam: the head's view of a picture is switched below
        t1, t2, acc_seeing, acc_blind, auto, off = [], [], [], [], [], []
        for r in range(rounds):
            m = picture(100 + r)  # a new picture each round: the first turn encodes it
            first, _ = turns(m)
            ms, r1 = first_token_ms(e, J.Generate(messages=first, max_tokens=16, ignore_eog=True))
            t1.append(ms)
            _, second = turns(m, r1.text)
            ms, _ = first_token_ms(e, J.Generate(messages=second, max_tokens=16, ignore_eog=True))
            t2.append(ms)
            for blind, acc in ((False, acc_seeing), (True, acc_blind)):
                token = None if blind else _row_token(lm)
                for s in _sessions(lm):
                    s.media_row_token = token
                lm.session.reset()  # the picture's MTP entries are fed again, this way or the other
                job = J.Generate(messages=first, max_tokens=tokens, ignore_eog=True, draft_depth=3, suffix_drafts=False)
                res = e.submit(job).result()
                acc.append(res.stats.accepted / max(1, res.stats.drafted))
            for s in _sessions(lm):
                s.media_row_token = _row_token(lm)
            for mtp, rates in ((J.Mtp.ON, auto), (J.Mtp.OFF, off)):
                # MTP's drafts only: suffix drafts would copy the earlier runs' replies
                job = J.Generate(messages=first, max_tokens=128, ignore_eog=True, mtp=mtp, suffix_drafts=False)
                res = e.submit(job).result()
                rates.append(res.stats.tokens_per_second)
        out = {
            "picture_rows": _rows(lm),
            "first_turn_ttft_ms": _med(t1),
            "next_turn_ttft_ms": _med(t2),
            f"acceptance_first_{tokens}_head_sees_picture": _med(acc_seeing, 3),
            f"acceptance_first_{tokens}_picture_as_holes": _med(acc_blind, 3),
            "tok_s_mtp_auto": _med(auto),
            "tok_s_mtp_off": _med(off),
        }
    return out


def _rows(lm) -> int:
    """The rows one picture takes in the prompt."""
    from engine.runtime.media.projector import MARKER

    return sum(1 for t in lm.projector.prompt(MARKER, [picture()]).tokens if t < 0)


def _row_token(lm) -> int:
    from engine.runtime.media.attach import media_row_token

    return media_row_token(lm.model)


def _sessions(lm) -> list:
    return [s.session for s in lm.slots.slots] if lm.slots is not None else [lm.session]


def _med(values: list[float], nd: int = 1) -> float:
    return round(statistics.median(values), nd) if values else 0.0


# --------------------------------------------------------------------- over HTTP
def data_uri(m: Media) -> str:
    return f"data:{m.mime};base64," + base64.b64encode(m.data).decode()


def stream_chat(
    c: httpx.Client, url: str, model: str, messages: list[dict], max_tokens: int, extra: dict | None = None
) -> tuple[float, float, int]:
    """(ms to the first content, decode tok/s after it, completion tokens) of one streamed
    chat completion (``c`` made beforehand: making a client costs tens of ms of CPU)."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    t0 = time.perf_counter()
    n, first, last = timed_stream(
        c, url + "/v1/chat/completions", body, lambda ch: (ch.get("delta") or {}).get("content")
    )
    first, last = first or t0, last or t0
    return (first - t0) * 1000, (n - 1) / (last - first) if last > first and n > 1 else 0.0, n


def over_http(server: ServerProcess, model: str, rounds: int, tokens: int, extra: dict | None = None) -> dict:
    t1, t2, rates = [], [], []
    # a connection per request: llama-server may close a kept-alive one as it is reused
    with httpx.Client(timeout=600, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        stream_chat(c, server.url, model, [{"role": "user", "content": "Hello"}], 4)  # warm-up
        for r in range(rounds):
            _http_round(c, server.url, model, r, tokens, t1, t2, rates, extra)
    return {"first_turn_ttft_ms": _med(t1), "next_turn_ttft_ms": _med(t2), "tok_s": _med(rates)}


def _http_round(
    c: httpx.Client, url: str, model: str, r: int, tokens: int, t1: list, t2: list, rates: list, extra: dict | None
) -> None:
    """Round ``r``: a new picture's first turn, then the next turn over it."""
    content = [
        {"type": "text", "text": QUESTION},
        {"type": "image_url", "image_url": {"url": data_uri(picture(200 + r))}},
    ]
    first = [{"role": "user", "content": content}]
    ms, rate, _ = stream_chat(c, url, model, first, tokens, extra)
    t1.append(ms)
    rates.append(rate)
    second = [*first, {"role": "assistant", "content": "I see a picture."}, {"role": "user", "content": "More?"}]
    ms, _, _ = stream_chat(c, url, model, second, 16, extra)
    t2.append(ms)


def main(argv: list[str] | None = None, prog: str = "python -m benchmarks.decoding.images") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, action="append", default=[], help="a qwen35 GGUF (default: the demo)")
    p.add_argument("--tokens", type=int, default=32, help="tokens after the picture whose drafts are counted")
    p.add_argument("--rounds", type=int, default=3)
    add_llama_server_args(p)
    args = p.parse_args(argv)
    binary = find_llama_server(args.llama_server)
    for model in args.model or [DEMO]:
        mmproj = projector_for(model)
        result = {
            "model": model.name,
            "projector": mmproj.name,
            "in_process": in_process(model, mmproj, args.tokens, args.rounds),
        }
        if binary:
            spec = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(args.llama_mtp_depth)]
            arms = {
                "ours_http_mtp_auto": lambda: ServerProcess.ours(
                    model, ["--mmproj", str(mmproj), "--ctx", "2048", "--no-fit-check"]
                ),
                "llama_server_draft_mtp": lambda: ServerProcess.llama_server(
                    binary, model, ["--mmproj", str(mmproj), "-c", "2048", *spec]
                ),
                "llama_server_no_spec": lambda: ServerProcess.llama_server(
                    binary, model, ["--mmproj", str(mmproj), "-c", "2048"]
                ),
            }
            for name, start in arms.items():
                try:
                    with start() as server:
                        ours = name.startswith("ours")
                        # MTP's drafts only: suffix drafts would copy the earlier rounds' replies
                        extra = {"suffix_drafts": False} if ours else None
                        result[name] = over_http(
                            server, server.model_name() if ours else "bench", args.rounds, 128, extra
                        )
                except (ServerError, httpx.HTTPError, OSError) as e:
                    return die(f"bench images: {name}: {e}", EXIT_INVALID)
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
