"""The endpoint's side of loading models on demand (engine.runtime.ondemand): leases
here, the model lists in :mod:`engine.server.ondemand.listing`.

Every route that runs a model calls :func:`hold` first: the model its body names is
resolved (any of its names), loaded when it is not (on a worker thread: the event loop
never waits), and leased for the request, and the body's ``model`` becomes the loaded
name. The lease ends with the request: :class:`~engine.server.flow.Flow` takes it over
for a generation and gives it back when the reply ends (streamed or not, the client gone
or not); :func:`on_demand` gives back any lease a route still holds when it returns or
fails. Without a residency (an app or test that serves only what it loaded) nothing
loads and every name must be a loaded one, as before.
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from engine.runtime.ondemand.residency import Lease, parse_keep_alive
from engine.runtime.modelinfo import ModelInfo


async def hold(request: Request, body: Any, *, keys: tuple[str, ...] = ("model",)) -> dict[str, ModelInfo]:
    """Lease the model ``body`` names (loading it on demand) and return the loaded models
    (what the body parsers check names against). A body without a name is left to its
    parser's 400."""
    st = request.app.state
    residency = getattr(st, "residency", None)
    if residency is None or not isinstance(body, dict):
        return st.engine.models()
    name = next((body[k] for k in keys if isinstance(body.get(k), str) and body[k]), None)
    if name is None:
        return st.engine.models()
    keep = parse_keep_alive(body["keep_alive"] if "keep_alive" in body else body.get("ttl"))
    # a loaded model's lease is taken here at once; a load (or a wait for one) on a worker thread
    lease = residency.try_acquire(name, keep_alive=keep) or await run_in_threadpool(
        residency.acquire, name, keep_alive=keep
    )
    let_go(request)  # a route that holds twice keeps one lease
    request.state.lease = lease
    for k in keys:
        if k in body:
            body[k] = lease.name
    body.setdefault(keys[0], lease.name)
    return st.engine.models()


def take(request: Request) -> Lease | None:
    """The request's lease, handed to whoever ends the request (a generation's Flow)."""
    lease = getattr(request.state, "lease", None)
    request.state.lease = None
    return lease


def let_go(request: Request) -> None:
    """End the request's lease, if it still holds one."""
    lease = take(request)
    if lease is not None:
        lease.release()


def on_demand(handler):
    """A route whose lease (if any) ends when it returns, unless a Flow took it over."""

    @functools.wraps(handler)
    async def route(request: Request, *args, **kw):
        try:
            return await handler(request, *args, **kw)
        finally:
            let_go(request)

    return route
