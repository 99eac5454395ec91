"""The child side of :mod:`engine.runtime.load.buildcheck`: the smoke test of the llama.cpp
build this process loaded. Loads the demo model with every layer offloaded, decodes a
few tokens plainly and with MTP, and prints one JSON object: the devices llama.cpp sees,
the layers it offloaded, whether both decodes agree, and ``ok``/``message``.

``python -m engine.runtime.load.buildcheck_child --expect cuda``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time

from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.llama.devices import list_devices, loaded_lib_dir
from engine.runtime.llama import repack
from engine.runtime.llama.lib import system_info
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.demo import demo_model_path


class _Offload(logging.Handler):
    """Catches llama.cpp's "offloaded N/M layers to GPU" log line."""

    pattern = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.found: tuple[int, int] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        m = self.pattern.search(record.getMessage())
        if m:
            self.found = (int(m.group(1)), int(m.group(2)))


def _child(expect: str) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    handler = _Offload()
    lg = logging.getLogger("llama.cpp")
    lg.setLevel(logging.DEBUG)
    lg.addHandler(handler)

    report: dict = {"ok": False, "expect": expect, "lib_dir": str(loaded_lib_dir())}
    devices = list_devices()
    report["devices"] = [d.to_json() for d in devices]
    report["system_info"] = system_info()
    report["repack"] = repack.verdict().to_json()  # this build's on this CPU: the load below follows it
    gpu_devices = [d for d in devices if d.gpu]
    lm = load(LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED, n_gpu_layers=-1, n_ctx=512, probe=False))
    try:
        report["offloaded_layers"] = list(handler.found) if handler.found else None
        prompt = lm.model.tokenize("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        plain = generate(lm.session, prompt, DecodeParams(max_tokens=24))
        t = time.perf_counter()
        spec = generate(lm.session, prompt, DecodeParams(max_tokens=24, depth=FixedDepth(2)))
        report["seconds"] = time.perf_counter() - t
        report["identical"] = plain.tokens == spec.tokens and len(plain.tokens) > 0
        report["acceptance"] = spec.stats.acceptance
    finally:
        lm.close()
    problems = []
    if expect in ("cuda", "metal"):
        if not gpu_devices:
            problems.append(f"a {expect} build but llama.cpp sees no GPU: it would run on the CPU")
        elif not report["offloaded_layers"] or report["offloaded_layers"][0] == 0:
            problems.append("the GPU is visible but no layer was offloaded to it")
    if not report["identical"]:
        problems.append("speculative and plain decoding disagree")
    report["problems"] = problems
    report["ok"] = not problems
    report["message"] = (
        "; ".join(problems)
        if problems
        else (
            f"ok: {len(gpu_devices)} GPU device(s), offloaded {report['offloaded_layers']}"
            if gpu_devices
            else "ok: CPU"
        )
    )
    print(json.dumps(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.runtime.load.buildcheck_child")
    ap.add_argument("--expect", default="cpu", choices=["cpu", "cuda", "metal"])
    a = ap.parse_args(argv)
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    return _child(a.expect)


if __name__ == "__main__":
    raise SystemExit(main())
