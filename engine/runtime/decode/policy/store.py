"""Learned speed that persists: each loaded model's adaptive-depth policy, on disk, and
the policy a request's draft depth gets (:func:`depth_policy`).

What ``draft_depth="auto"`` learns — what a round costs at each depth (windows of wall
times, verify cost by batch width, draft-step and catch-up cost), acceptance by draft
position — belongs to one (model files, head, llama.cpp build,
threads, offload, exact mode) combination on one machine. The engine keeps one policy per
loaded model across requests and saves it after each; the first request after a restart
starts from what this machine measured. With slots, the policies of steps of
several sequences (engine.runtime.decode.policy.steps) are kept in the same file. A changed
file (size or mtime) or build gives
another key, so stale costs are never used. The key is taken once, when the policy is
first needed: it names what was loaded.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from engine.errors import InvalidRequestError
from engine.fileio import write_json_atomic
from engine.paths import cache_dir
from engine.runtime.decode.depth import DraftDepth
from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.base import DepthPolicy, FixedDepth
from engine.runtime.llama.cachekey import model_key

log = logging.getLogger(__name__)

STORE_VERSION = 2  # 2: costs as windows of round wall times (engine.runtime.decode.policy.costs)


def policy_path(lm) -> Path:
    """Where the policy of this combination (a :class:`LoadedModel`) is kept."""
    spec = lm.spec
    settings = [lm.source.value, spec.n_threads, spec.n_gpu_layers, spec.exact, lm.max_draft_depth]
    if spec.rpc:  # a verify's cost over the network is another world: learn it separately, per pool and split
        settings += [*spec.rpc, spec.tensor_split]
    key = model_key(STORE_VERSION, spec.path, lm.info.head, *settings)
    return cache_dir() / "adaptive" / f"{key[:32]}.json"


def load_policy(path: Path, max_depth: int) -> AdaptiveDepth:
    """The policy saved at ``path``, or a fresh one."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return AdaptiveDepth(max_depth)
    return AdaptiveDepth.from_state(max_depth, state)


def save_policy(path: Path, policy: AdaptiveDepth) -> None:
    try:
        state = policy.state()
    except RuntimeError:  # a window changed while it was read: the next save takes it
        return
    try:
        write_json_atomic(path, state, fsync=False)
    except OSError as e:  # learning is an optimisation: never fail a request over it
        log.warning("could not save the adaptive policy: %s", e)


def depth_policy(lm, depth: DraftDepth) -> DepthPolicy:
    """The policy for a request's ``depth`` on ``lm`` (a :class:`LoadedModel`): auto's is
    the model's one, loaded from this machine's file on first use (``lm.auto_depth()``); a
    fixed depth must fit the contexts' sizing. Any thread (requests are prepared off the
    engine thread too)."""
    if depth.is_auto:
        return lm.auto_depth()
    assert depth.fixed is not None
    if depth.fixed > lm.max_draft_depth:
        raise InvalidRequestError(
            f"draft depth {depth.fixed} exceeds this model's maximum of {lm.max_draft_depth} "
            "(reload it with a larger max draft depth)",
            param="draft_depth",
        )
    return FixedDepth(depth.fixed)
