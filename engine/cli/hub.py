"""``mtp-studio search | pull | models | rm | import``: Hugging Face and the model library."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from engine.cli import EXIT_INVALID, EXIT_OK, die


def register(sub) -> None:
    p = sub.add_parser("search", help="search Hugging Face for GGUF models")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument(
        "--files",
        action="store_true",
        help="also list each repo's GGUF files and whether each fits this machine (slower)",
    )
    p.add_argument(
        "--ctx", type=int, default=4096, help="context size the fit is judged at (with --files; default 4096)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_search)

    p = sub.add_parser("pull", help="download a model (and its MTP head or projector) into the library")
    p.add_argument("repo")
    p.add_argument("file_arg", nargs="?", metavar="FILE", help="file (or first shard) to download (as --file)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--file", help="file (or first shard) to download")
    which.add_argument("--quant", help="quantization to download, e.g. Q4_K_M")
    p.add_argument("--revision", help="branch, tag or commit (default: main)")
    p.add_argument("--head", help="MTP head to pull with it: REPO or REPO:FILE")
    p.add_argument(
        "--mmproj",
        nargs="?",
        const=True,
        default=False,
        metavar="FILE",
        help="also pull the model's multimodal projector, so that it reads images: the repo's own, chosen as "
        "llama.cpp's -hf does (same folder, closest quantization), or FILE (REPO:FILE for another repo's)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_pull)

    p = sub.add_parser("models", help="models in the library")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_models)

    p = sub.add_parser("rm", help="delete a model from the library")
    p.add_argument("name", help="model id or name (see `mtp-studio models`)")
    p.set_defaults(func=run_rm)

    p = sub.add_parser("import", help="copy a local GGUF (validated first) into the library")
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_import)


def _library():
    from engine.hub.library import Library

    return Library()


def _size(n: int) -> str:
    from engine.gguf.inspect import human_size

    return human_size(n)


def _sees(projector) -> str:
    """What a projector entry lets its model read besides text, in words."""
    return " and ".join({"vision": "images"}.get(m, m) for m in projector.facts.modalities) or "images"


def _fit_json(fit) -> dict | None:
    return fit.to_json() if fit is not None else None  # None: no layers to place (a projector)


def run_search(args) -> int:
    from engine.errors import MtpStudioError
    from engine.hub.remote import HubConfig, list_gguf, search

    cfg = HubConfig.from_env()
    devices = None
    try:
        hits = search(cfg, args.query, args.limit)
        out = []
        for h in hits:
            item = {"repo": h.repo_id, "downloads": h.downloads, "likes": h.likes, "updated": h.updated}
            if args.files:
                from engine.runtime.load.fit import machine_devices
                from engine.runtime.load.recommend import remote_fit

                devices = devices or machine_devices()
                rev, groups = list_gguf(cfg, h.repo_id)
                item["files"] = [
                    {
                        "name": g.name,
                        "quant": g.quant,
                        "size": g.size,
                        "shards": len(g.files),
                        "complete": g.complete,
                        "mtp_head": g.head,
                        "projector": g.projector,
                        "fit": _fit_json(remote_fit(cfg, h.repo_id, g, rev, args.ctx, devices))
                        if not g.head and not g.projector and g.complete
                        else None,
                    }
                    for g in groups
                ]
            out.append(item)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    if args.json:
        print(json.dumps(out))
        return EXIT_OK
    for item in out:
        print(f"{item['repo']:<50} {item['downloads']:>10,} downloads")
        for f in item.get("files", []):
            tag = " [MTP head]" if f["mtp_head"] else " [projector]" if f["projector"] else ""
            shards = f" ({f['shards']} shards)" if f["shards"] > 1 else ""
            fit = ""
            if f.get("fit"):
                fit = f"  [{f['fit']['label']}" + (
                    f", up to context {f['fit']['max_ctx']}]" if f["fit"]["max_ctx"] else "]"
                )
            print(f"    {f['quant'] or '?':<10} {_size(f['size']):>10}  {f['name']}{shards}{tag}{fit}")
    if not out:
        print("no GGUF repos found")
    return EXIT_OK


def run_pull(args) -> int:
    from engine.errors import Cancelled, MtpStudioError
    from engine.hub.pull import pull
    from engine.hub.remote import HubConfig

    last = [0.0]

    def progress(p) -> None:
        now = time.monotonic()
        if args.json or now - last[0] < 0.5 and p.done < p.total:
            return
        last[0] = now
        eta = f", {p.file.eta_s:.0f} s left" if p.file.eta_s else ""
        print(
            f"\r{p.file.filename}: {100 * p.fraction:5.1f}% of {_size(p.total)} at {_size(int(p.file.rate))}/s{eta}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    if args.file_arg and (args.quant or args.file not in (None, args.file_arg)):
        other = "--quant" if args.quant else "--file"
        return die(f"{args.file_arg} and {other} both pick the file to download; give one of them", EXIT_INVALID)
    try:
        res = pull(
            HubConfig.from_env(),
            _library(),
            args.repo,
            file=args.file or args.file_arg,
            quant=args.quant,
            revision=args.revision,
            head=args.head,
            mmproj=args.mmproj,
            progress=progress,
        )
    except (KeyboardInterrupt, Cancelled):
        return die("cancelled; the partial download is kept and the next pull resumes it", EXIT_INVALID)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    if args.json:
        print(json.dumps(res.to_json()))
        return EXIT_OK
    print(file=sys.stderr)
    lib = _library()
    for e in (res.model, res.head):
        if e is not None:
            print(
                f"{'already in' if res.already_local else 'added to'} the library: {e.id} ({e.mtp}) {e.path(lib.root)}"
            )
    if res.projector is not None:
        sees = _sees(res.projector)
        print(f"projector: {res.projector.id} {res.projector.path(lib.root)}; {res.model.id} reads {sees} with it")
    if res.head is not None:
        print(
            "compose them into one model with:\n  mtp-studio compose --target "
            f"{res.model.path(lib.root)} --head {res.head.path(lib.root)} --out <composite.gguf>"
        )
    return EXIT_OK


def run_models(args) -> int:
    lib = _library()
    entries = lib.entries()
    if args.json:
        print(
            json.dumps(
                {
                    "root": str(lib.root),
                    "total_bytes": sum(e.size for e in entries),
                    "models": [dict(e.__dict__, path=str(e.path(lib.root))) for e in entries],
                }
            )
        )
        return EXIT_OK
    for e in entries:
        src = e.origin.repo or e.origin.path or e.origin.source
        pair = f", paired with {e.pair}" if e.pair else ""
        if e.projector:
            proj = next((p for p in entries if p.id == e.projector), None)
            pair += f", reads {_sees(proj) if proj else 'images'} with {e.projector}"
        pair += f", a projector: reads {_sees(e)} for its model" if e.kind == "projector" else ""
        quant = e.facts.quantization or "?"
        print(f"{e.id:<40} {quant:<8} {_size(e.size):>10}  MTP: {e.mtp:<14} {src}{pair}")
    print(f"{len(entries)} model(s), {_size(sum(e.size for e in entries))} in {lib.root}")
    return EXIT_OK


def run_rm(args) -> int:
    from engine.errors import MtpStudioError

    try:
        e = _library().delete(args.name)
    except MtpStudioError as err:
        return die(str(err), EXIT_INVALID)
    print(f"deleted {e.id} ({_size(e.size)})")
    return EXIT_OK


def run_import(args) -> int:
    from engine.errors import MtpStudioError

    try:
        e = _library().import_file(args.file)
    except MtpStudioError as err:
        return die(str(err), EXIT_INVALID)
    if args.json:
        print(json.dumps(e.__dict__))
    else:
        print(f"imported {e.id} ({e.mtp}, {_size(e.size)})")
    return EXIT_OK
