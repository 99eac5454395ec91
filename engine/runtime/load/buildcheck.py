"""Proof that a backend build works: its smoke test, run in a child process with its library.

The child (:mod:`engine.runtime.load.buildcheck_child`) loads the demo model with every
layer offloaded, reports the devices llama.cpp sees and how many layers it offloaded,
decodes a few tokens plainly and with MTP, and checks they agree. A GPU build that ends
up running on the CPU fails, loudly.
"""

from __future__ import annotations

from engine.childproc import child_env, run_child

CHILD_MODULE = "engine.runtime.load.buildcheck_child"


def run_smoke(expect: str, lib_dir: str | None, timeout: float = 600) -> dict:
    """Run the smoke test of a build (``lib_dir`` None: the installed library)."""
    extra = {"LLAMA_CPP_LIB_PATH": lib_dir} if lib_dir else {}
    env = child_env(**extra)
    if not lib_dir:
        env.pop("LLAMA_CPP_LIB_PATH", None)
    env["MTP_STUDIO_NO_BACKEND_SELECTION"] = "1"  # test exactly this library
    o = run_child(CHILD_MODULE, "--expect", expect, timeout=timeout, env=env)
    if o.timed_out:
        return {"ok": False, "message": f"the smoke test did not finish within {timeout:.0f} s"}
    if o.returncode == 0 and o.last:
        return o.last
    tail = " | ".join(o.stderr_tail)
    return {"ok": False, "message": f"the smoke test crashed (status {o.returncode}): {tail}"}
