"""``mtp-studio serve``: the OpenAI-compatible endpoint without the GUI."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cli import EXIT_INVALID, EXIT_USAGE, die
from engine.cli.generate import add_model_args, context_line, depth_arg, load_spec
from engine.settings import DEFAULT_PARALLEL
from engine.settings import DEFAULT_PROMPT_CACHE_MB
from engine.runtime.ondemand.residency import BUDGET_SHARE, DEFAULT_IDLE_TTL_S, DEFAULT_MAX_LOADED

if TYPE_CHECKING:
    from engine.runtime.modelinfo import ModelInfo

API_KEY_ENV = "MTP_STUDIO_API_KEY"


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve models through a local OpenAI-, Anthropic- and Ollama-compatible endpoint")
    add_model_args(p, many=True)
    p.add_argument(
        "--library", action="store_true", help="with --model: also serve every library model by name, loaded on demand"
    )
    p.add_argument(
        "--idle-ttl",
        type=float,
        default=DEFAULT_IDLE_TTL_S,
        metavar="SECONDS",
        help="unload a model loaded on demand after this long without requests (default "
        f"{DEFAULT_IDLE_TTL_S:g}; -1: never); requests may set their own (keep_alive, ttl)",
    )
    p.add_argument(
        "--max-models",
        type=int,
        default=DEFAULT_MAX_LOADED,
        metavar="N",
        help=f"models loaded at once (default {DEFAULT_MAX_LOADED}); the least recently used idle one "
        "is unloaded to make room",
    )
    p.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        metavar="MB",
        help=f"memory loaded models may take, by their estimates (default {BUDGET_SHARE * 100:.0f}%% of this "
        "machine's: its GPUs' with a GPU build)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require 'Authorization: Bearer KEY' (needed to bind other addresses); prefer the {API_KEY_ENV} "
        "environment variable: a command line is visible to every user of the machine",
    )
    p.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin (repeatable)")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        help="also answer requests whose Host header names this host (repeatable; loopback names always work)",
    )
    p.add_argument("--draft-depth", type=depth_arg, default=None, help="default draft depth, or 'auto'")
    p.add_argument("--max-pending", type=int, default=16, help="requests queued or running before 429")
    p.add_argument(
        "--parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        metavar="N",
        help=f"requests decoded together, each with MTP (default {DEFAULT_PARALLEL}; each has a KV cache of "
        "--ctx tokens, and fewer are used when they do not fit; 1: one at a time)",
    )
    p.add_argument(
        "--ollama-port",
        type=int,
        nargs="?",
        const=11434,
        default=None,
        metavar="PORT",
        help="also listen where Ollama clients look (default 11434), for VS Code Copilot, Open WebUI, "
        "Continue, Cline, aider's ollama_chat/",
    )
    p.add_argument(
        "--thinking-budget",
        type=int,
        default=None,
        metavar="N",
        help="thinking models: most tokens a reply may think before its answer is started for it "
        "(requests may set thinking_budget_tokens; default unlimited)",
    )
    p.add_argument(
        "--media-urls",
        action="store_true",
        help="fetch the http(s) image URLs requests send (off: clients send the bytes; on, the server reaches "
        "any address a client names)",
    )
    p.add_argument(
        "--media-path",
        default=None,
        metavar="DIR",
        help="let requests read file:// images from under this folder (default: no files are read)",
    )
    p.add_argument(
        "--cache-ram",
        type=int,
        default=DEFAULT_PROMPT_CACHE_MB,
        metavar="MB",
        help="host memory for prompt-cache snapshots, so conversations that take turns resume "
        f"where they were (default {DEFAULT_PROMPT_CACHE_MB}; 0: off)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.errors import MtpStudioError
    from engine.runtime import jobs as J
    from engine.runtime.engine import Engine, EngineConfig
    from engine.runtime.decider import INTERACTIVE
    from engine.server.runner import ServerThread
    from engine.server.settings import ServerSettings

    settings = ServerSettings(
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        cors_origins=tuple(args.cors_origin),
        allowed_hosts=tuple(h.lower() for h in args.allow_host),
        max_pending=args.max_pending,
        draft_depth=args.draft_depth,
        thinking_budget=args.thinking_budget,
        ollama_port=args.ollama_port,
        media_urls=args.media_urls,
        media_folder=args.media_path,
    )
    try:
        settings.check()
        if args.thinking_budget is not None:
            from engine.runtime.limits import check_thinking_budget

            check_thinking_budget(args.thinking_budget)
    except ValueError as e:
        return die(str(e), EXIT_USAGE)
    # the endpoint's --draft-depth (in its settings) over the engine's (auto)
    if args.cache_ram < 0:
        return die("--cache-ram must be 0 (off) or a size in MB", EXIT_USAGE)
    if args.max_models < 1:
        return die("--max-models must be at least 1", EXIT_USAGE)
    if args.head and len(args.model) != 1:
        return die("--head goes with exactly one --model", EXIT_USAGE)
    stems = [Path(m).name.removesuffix(".gguf") for m in args.model]
    if len(set(stems)) < len(stems):
        same = sorted({s for s in stems if stems.count(s) > 1})
        return die(
            f"several --model files are named {', '.join(same)}: requests name a model by its file's stem, so "
            "each must differ (rename or link one)",
            EXIT_USAGE,
        )
    from dataclasses import replace

    from engine.runtime.ondemand.catalog import Catalog
    from engine.runtime.ondemand.residency import Residency
    from engine.runtime.load.loader import LoadSpec, MtpSource

    base = load_spec(argparse.Namespace(**{**vars(args), "model": args.model[0] if args.model else ""}))
    library = None
    if not args.model or args.library:
        from engine.hub.library import Library

        library = Library()
    catalog = Catalog(library, tuple(Path(m) for m in args.model))

    def spec_for(s) -> LoadSpec:
        if s.kind != "chat":  # embeddings and reranking: one pooled context, no drafting
            return replace(base, path=s.path, head=None, mtp=MtpSource.OFF, parallel=1, name=s.name)
        # --head and --mmproj go with the first --model; a library model brings its own
        mmproj = (base.mmproj if Path(s.path) == Path(base.path) else None) if s.named else s.projector
        return replace(base, path=s.path, head=s.head if not s.named else base.head, name=s.name, mmproj=mmproj)

    with Engine(EngineConfig(request=INTERACTIVE, prompt_cache_mb=args.cache_ram)) as engine:
        infos = []
        try:
            for stem in stems:
                s = catalog.get(stem)
                infos.append(engine.submit(J.LoadModel(spec_for(s), replace=False)).result())
        except MtpStudioError as e:
            return die(str(e), EXIT_INVALID)
        residency = Residency(
            engine,
            catalog,
            spec_for,
            max_loaded=max(args.max_models, len(infos)),
            idle_ttl=None if args.idle_ttl < 0 else args.idle_ttl,
            memory_budget=args.memory_budget << 20 if args.memory_budget else None,
        )
        server = ServerThread(engine, settings, residency=residency)
        try:
            server.start()
            server.wait_ready()
        except OSError as e:
            residency.close()
            return die(str(e), EXIT_INVALID)
        key = "API key required" if settings.api_key else "no API key"
        for info in infos:
            print(f"serving {info.name} (MTP: {info.mtp}) at {server.url}/v1 ({key})", flush=True)
            _describe_load(info)
        if library is not None:
            n = len([s for s in catalog.items() if not s.named])
            ttl = "never unloaded" if args.idle_ttl < 0 else f"unloaded after {args.idle_ttl:g} s idle"
            print(
                f"serving {n} library model(s) by name at {server.url}/v1 ({key}): loaded on demand, {ttl}, "
                f"at most {residency.max_loaded} at once",
                flush=True,
            )
        print(
            f"APIs: OpenAI {server.url}/v1 (chat, completions, responses, embeddings) · Anthropic {server.url} "
            f"(messages) · Ollama {server.url}" + (f" and port {server.ollama_port}" if server.ollama_port else ""),
            flush=True,
        )
        from engine.runtime.llama import repack

        if notice := repack.verdict().notice:  # once, where a server's user looks: its console
            print(f"note: {notice}", file=sys.stderr, flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(0.5):  # the main thread stays in Python, so the handlers run
            pass
        print("stopping", file=sys.stderr)
        server.stop()
        residency.close()
    return 0


def _describe_load(info: ModelInfo) -> None:
    """What one load chose, for the console."""
    print(f"chat template: {info.chat_template}", flush=True)
    print(context_line(info), flush=True)
    if info.parallel < info.parallel_requested:
        print(
            f"parallel: {info.parallel} of {info.parallel_requested} requested (what fits this machine's memory)",
            flush=True,
        )
    for note in [*info.fallbacks, *([info.mtp_off_reason] if info.mtp_off_reason else [])]:
        print(f"note: {note}", file=sys.stderr, flush=True)
    if info.placement:
        from engine.cli.generate import placement_line

        print(f"layers: {placement_line(info.placement)}", flush=True)
