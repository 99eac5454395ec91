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


def run(args) -> int:
    found = all_paths()
    if args.json:
        print(json.dumps({**found, "frozen": bool(getattr(sys, "frozen", False))}))
    else:
        width = max(map(len, found))
        for name, path in found.items():
            print(f"{name:<{width}}  {path}")
    return 0
