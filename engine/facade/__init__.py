"""The engine as the app may use it: the one door from ``app/`` into ``engine/``.

Everything the GUI needs of the engine is named here (or in this package's submodules, for
what the app loads only when asked, so that starting the window stays fast); the import
contract in pyproject.toml forbids ``app`` every other engine module. What is not here is
the engine's own business: a page that wants more asks for it here, in one reviewed place.

- this module: jobs and their results (:data:`J`), the engine and its defaults, load
  settings, what a load made of a model (:class:`ModelInfo`) and the slots' and prompt
  caches' figures, draft depth and grammar, a reply's parts, the library, settings,
  errors, the app's folders, the Performance page's A/B bench, and loading library models
  on demand;
- :mod:`engine.facade.endpoint`: the local HTTP server (on-demand loading is here);
- :mod:`engine.facade.hub`: Hugging Face search, downloads and composing a head;
- :mod:`engine.facade.machine`: backends, devices, memory fit and RPC;
- :mod:`engine.facade.media`: pictures in a chat turn (checked media and their parts);
- :mod:`engine.facade.launch`: the command line and the self-test, for the launcher.
"""

from __future__ import annotations

from engine import settings
from engine.errors import (
    Cancelled,
    DiskSpaceError,
    InsufficientMemoryError,
    InvalidSettingError,
    LibraryError,
    MtpStudioError,
)
from engine.fileio import write_json_atomic
from engine.paths import data_dir, ensure, log_dir
from engine.gguf.inspect import human_size
from engine.hub.library import EntryKind, Library, MtpStatus
from engine.runtime import jobs as J
from engine.runtime import limits
from engine.runtime.decode.cache.snapshotcache import CacheFigures
from engine.runtime.decode.depth import DraftDepth, Mtp
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.decode.stats import GenerationStats, RoundStats
from engine.runtime.engine import Engine, EngineConfig, JobHandle
from engine.runtime.llama import exact
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.measure.bench import DEFAULT_PROMPTS, BenchResult, bench_job, parse_depths
from engine.runtime.modelinfo import CHAT, EMBEDDING, RERANK, ModelInfo
from engine.runtime.ondemand.catalog import Catalog, header_facts
from engine.runtime.ondemand.residency import Residency, ResidentInfo
from engine.runtime.prompt.reply import Part, Reply
from engine.runtime.decider import INTERACTIVE
from engine.runtime.slots.pool import SlotInfo
from engine.settings import DEFAULT_PROMPT_CACHE_MB, Settings
from engine.synth.demo import demo_model_path, resources_dir

__all__ = [
    "CHAT",
    "DEFAULT_PROMPTS",
    "DEFAULT_PROMPT_CACHE_MB",
    "EMBEDDING",
    "INTERACTIVE",
    "RERANK",
    "BenchResult",
    "CacheFigures",
    "Catalog",
    "Cancelled",
    "DiskSpaceError",
    "DraftDepth",
    "Engine",
    "EngineConfig",
    "EntryKind",
    "GenerationStats",
    "GrammarSpec",
    "InsufficientMemoryError",
    "InvalidSettingError",
    "J",
    "JobHandle",
    "Library",
    "LibraryError",
    "LoadSpec",
    "ModelInfo",
    "Mtp",
    "MtpSource",
    "MtpStatus",
    "MtpStudioError",
    "Part",
    "Reply",
    "Residency",
    "ResidentInfo",
    "RoundStats",
    "Settings",
    "SlotInfo",
    "bench_job",
    "data_dir",
    "demo_model_path",
    "ensure",
    "exact",
    "header_facts",
    "human_size",
    "limits",
    "log_dir",
    "parse_depths",
    "resources_dir",
    "settings",
    "write_json_atomic",
]
