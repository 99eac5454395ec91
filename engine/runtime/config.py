"""What an engine is started with (:class:`EngineConfig`): the defaults a request gets for
the values it leaves out, the queue's bound, where models with RPC devices run, and the prompt
cache's budget."""

from __future__ import annotations

from dataclasses import dataclass

from engine.runtime import jobs as J
from engine.settings import DEFAULT_PROMPT_CACHE_MB


@dataclass(frozen=True)
class EngineConfig:
    """How an engine runs, fixed when it starts: the request defaults it puts under every
    job's own values (one layer of the decider's), its queue, whether RPC models run in a
    worker process, and each loaded model's prompt-cache budget."""

    #: what a request gets for the values it leaves out (the app's or the CLI's
    #: defaults, under the submitter's own: engine.runtime.decider)
    request: J.Defaults = J.Defaults()
    max_queue: int = 64
    #: run models with remote (RPC) devices in a worker process (engine.runtime.worker);
    #: off only inside that worker
    isolate_rpc: bool = True
    #: host memory for prompt-cache snapshots of each loaded model (0: off)
    prompt_cache_mb: int = DEFAULT_PROMPT_CACHE_MB
