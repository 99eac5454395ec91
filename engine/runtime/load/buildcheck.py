"""Proof that a backend build works: run in a child process with its library.

Loads the demo model with every layer offloaded, reports the devices llama.cpp sees
and how many layers it offloaded, decodes a few tokens plainly and with MTP, and checks
they agree. A GPU build that ends up running on the CPU fails, loudly.

``python -m engine.runtime.load.buildcheck --expect cuda [--lib-dir DIR]`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time

from engine.childproc import child_env, module_command
from engine.runtime.decode.loop import DecodeParams, FixedDepth, generate
from engine.runtime.llama.devices import list_devices, loaded_lib_dir
from engine.runtime.llama.lib import system_info
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.synth.demo import demo_model_path


def run_smoke(expect: str, lib_dir: str | None, timeout: float = 600) -> dict:
    """Run the smoke test of a build (``lib_dir`` None: the installed library)."""
    extra = {"LLAMA_CPP_LIB_PATH": lib_dir} if lib_dir else {}
    env = child_env(**extra)
    if not lib_dir:
        env.pop("LLAMA_CPP_LIB_PATH", None)
    env["MTP_STUDIO_NO_BACKEND_SELECTION"] = "1"  # test exactly this library
    try:
        p = subprocess.run(
            module_command("engine.runtime.load.buildcheck", "--expect", expect), capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "message": f"the smoke test did not finish within {timeout:.0f} s"}
    lines = p.stdout.strip().splitlines()
    if p.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except ValueError:
            pass
    tail = " | ".join(p.stderr.strip().splitlines()[-3:])
    return {"ok": False, "message": f"the smoke test crashed (status {p.returncode}): {tail}"}


class _Offload(logging.Handler):
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
    report["devices"] = list_devices()
    report["system_info"] = system_info()
    gpu_devices = [d for d in report["devices"] if d["type"] in ("gpu", "igpu")]
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
    report["message"] = "; ".join(problems) if problems else (
        f"ok: {len(gpu_devices)} GPU device(s), offloaded {report['offloaded_layers']}" if gpu_devices else "ok: CPU"
    )
    print(json.dumps(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine.runtime.load.buildcheck")
    ap.add_argument("--expect", default="cpu", choices=["cpu", "cuda", "metal"])
    a = ap.parse_args(argv)
    os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    return _child(a.expect)


if __name__ == "__main__":
    raise SystemExit(main())
