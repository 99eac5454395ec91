"""Learned speed that persists: each loaded model's adaptive-depth policy, on disk.

What ``draft_depth="auto"`` learns — verify cost by batch width, draft-step and catch-up
cost, acceptance by draft position — belongs to one (model files, head, llama.cpp build,
threads, offload, exact mode) combination on one machine. The engine keeps one policy per
loaded model across requests and saves it after each; the first request after a restart
starts from what this machine measured. A changed file (size or mtime) or build gives
another key, so stale costs are never used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path

from engine.runtime.adaptive import AdaptiveDepth
from engine.runtime.loadprobe import build_identity

log = logging.getLogger(__name__)

STORE_VERSION = 1


def _identity(path: str | Path | None) -> list[str]:
    if path is None:
        return ["-"]
    p = Path(path)
    st = p.stat()
    return [str(p.resolve()), str(st.st_size), str(st.st_mtime_ns)]


def policy_key(lm) -> str:
    """The combination a learned policy belongs to (a :class:`LoadedModel`)."""
    spec = lm.spec
    parts = [str(STORE_VERSION), *_identity(spec.path), *_identity(lm.info.get("head")), *build_identity()]
    parts += [lm.source.value, str(spec.n_threads), str(spec.n_gpu_layers), str(spec.exact), str(lm.max_draft_depth)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _folder() -> Path:
    from engine.paths import cache_dir

    return cache_dir() / "adaptive"


def load_policy(lm) -> AdaptiveDepth:
    """The model's policy as last saved on this machine, or a fresh one."""
    path = _folder() / f"{policy_key(lm)}.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return AdaptiveDepth(lm.max_draft_depth)
    return AdaptiveDepth.from_state(lm.max_draft_depth, state)


def save_policy(lm, policy: AdaptiveDepth) -> None:
    folder = _folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{policy_key(lm)}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(policy.state()))
        tmp.replace(path)
    except OSError as e:  # learning is an optimisation: never fail a request over it
        log.warning("could not save the adaptive policy: %s", e)
