"""``mtp-studio paths``: where this installation keeps models, backends, settings and logs."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    p = sub.add_parser("paths", help="where models, backend builds, settings, caches and logs live")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def all_paths() -> dict[str, str]:
    from engine import paths

    return {
        "models": str(paths.models_dir()),
        "backends": str(paths.backends_dir()),
        "data": str(paths.data_dir()),
        "config": str(paths.config_dir()),
        "cache": str(paths.cache_dir()),
        "logs": str(paths.log_dir()),
    }


def memory() -> dict[str, str]:
    """What this installation keeps in memory, by default, next to where it keeps files."""
    from engine.settings import DEFAULT_PROMPT_CACHE_MB

    return {
        "prompt cache": f"{DEFAULT_PROMPT_CACHE_MB} MB of host memory per loaded model by default "
        "(app: Server page; serve: --cache-ram MB; 0: off)"
    }


def run(args) -> int:
    from engine.settings import DEFAULT_PROMPT_CACHE_MB

    found = all_paths()
    if args.json:
        print(
            json.dumps(
                {**found, "frozen": bool(getattr(sys, "frozen", False)), "prompt_cache_mb": DEFAULT_PROMPT_CACHE_MB}
            )
        )
    else:
        rows = {**found, **memory()}
        width = max(map(len, rows))
        for name, value in rows.items():
            print(f"{name:<{width}}  {value}")
    return 0
