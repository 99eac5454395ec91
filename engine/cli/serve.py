"""``mtp-studio serve``: the OpenAI-compatible endpoint without the GUI."""

from __future__ import annotations

import os
import signal
import sys
import threading

from engine.cli import EXIT_INVALID, EXIT_USAGE, die
from engine.cli.generate import add_model_args, context_line, depth_arg, load_spec
from engine.settings import DEFAULT_PARALLEL
from engine.settings import DEFAULT_PROMPT_CACHE_MB

API_KEY_ENV = "MTP_STUDIO_API_KEY"


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a model through a local OpenAI-compatible endpoint")
    add_model_args(p)
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
    p.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL, metavar="N",
                   help=f"requests decoded together, each with MTP (default {DEFAULT_PARALLEL}; each has a KV cache of "
                        "--ctx tokens, and fewer are used when they do not fit; 1: one at a time)")  # fmt: skip
    p.add_argument("--ollama-port", type=int, nargs="?", const=11434, default=None, metavar="PORT",
                   help="also listen where Ollama clients look (default 11434), for VS Code Copilot, Open WebUI, "
                        "Continue, Cline, aider's ollama_chat/")  # fmt: skip
    p.add_argument("--thinking-budget", type=int, default=None, metavar="N",
                   help="thinking models: most tokens a reply may think before its answer is started for it "
                        "(requests may set thinking_budget_tokens; default unlimited)")  # fmt: skip
    p.add_argument("--cache-ram", type=int, default=DEFAULT_PROMPT_CACHE_MB, metavar="MB",
                   help="host memory for prompt-cache snapshots, so conversations that take turns resume "
                        f"where they were (default {DEFAULT_PROMPT_CACHE_MB}; 0: off)")  # fmt: skip
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.errors import MtpStudioError
    from engine.runtime import jobs as J
    from engine.runtime.engine import Engine, EngineDefaults
    from engine.runtime.request import INTERACTIVE
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
    with Engine(EngineDefaults(request=INTERACTIVE, prompt_cache_mb=args.cache_ram)) as engine:
        try:
            info = engine.submit(J.LoadModel(load_spec(args))).result()
        except MtpStudioError as e:
            return die(str(e), EXIT_INVALID)
        server = ServerThread(engine, settings)
        try:
            server.start()
            server.wait_ready()
        except OSError as e:
            return die(str(e), EXIT_INVALID)
        key = "API key required" if settings.api_key else "no API key"
        print(f"serving {info['name']} (MTP: {info['mtp']}) at {server.url}/v1 ({key})", flush=True)
        print(f"chat template: {info.get('chat_template')}", flush=True)
        print(context_line(info), flush=True)
        if info.get("parallel", 1) < info.get("parallel_requested", 1):
            print(f"parallel: {info['parallel']} of {info['parallel_requested']} requested (what fits this machine's memory)",
                  flush=True)  # fmt: skip
        print(f"APIs: OpenAI {server.url}/v1 (chat, completions, responses) · Anthropic {server.url} (messages) · "
              f"Ollama {server.url}" + (f" and port {server.ollama_port}" if server.ollama_port else ""), flush=True)
        for note in info.get("fallbacks", []):
            print(f"note: {note}", file=sys.stderr, flush=True)
        if info.get("repack_notice"):  # once, where a server's user looks: its console
            print(f"note: {info['repack_notice']}", file=sys.stderr, flush=True)
        if info.get("placement"):
            from engine.cli.generate import placement_line

            print(f"layers: {placement_line(info['placement'])}", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(0.5):  # the main thread stays in Python, so the handlers run
            pass
        print("stopping", file=sys.stderr)
        server.stop()
    return 0
