"""``mtp-studio rpc serve | devices``: lend this machine to others, see a pool's devices."""

from __future__ import annotations

import json
import sys

from engine.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, die


def register(sub) -> None:
    p = sub.add_parser("rpc", help="share this machine's devices with others, or list a pool's devices")
    rsub = p.add_subparsers(dest="rpc_command", metavar="ACTION", required=True)

    s = rsub.add_parser(
        "serve",
        help="run llama.cpp's RPC server for this machine's devices (until Ctrl-C)",
        description="Other machines then pass --rpc THIS_HOST:PORT. The protocol has no authentication: the server "
        "binds 127.0.0.1 unless --host and --allow-network are given.",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=50052, help="port (default 50052; 0: any free one)")
    s.add_argument(
        "--cache", action="store_true", help="keep received weights on disk so the next load skips the network"
    )
    s.add_argument("--threads", type=int, default=None, help="CPU threads of the served CPU device")
    s.add_argument(
        "--device", action="append", default=[], help="serve only this device (repeatable; default: GPUs, else CPU)"
    )
    s.add_argument(
        "--allow-network",
        action="store_true",
        help="required to bind an address other machines can reach: anyone who can connect can use this machine",
    )
    s.set_defaults(func=run_serve)

    d = rsub.add_parser("devices", help="the devices a list of RPC servers offers, and a model's layer placement")
    d.add_argument("--rpc", required=True, metavar="HOST:PORT,...")
    d.add_argument("--model", help="also show where this model's layers would go")
    d.add_argument("--tensor-split", metavar="W,W,...", default=None)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_devices)


def run_serve(args) -> int:
    from engine.errors import MtpStudioError
    from dataclasses import replace

    from engine.rpc.server import ServerOptions, default_threads, free_port, serve_forever, weight_cache_dir

    opts = ServerOptions(
        host=args.host,
        port=args.port,
        threads=args.threads,
        cache=args.cache,
        devices=tuple(args.device),
        allow_network=args.allow_network,
    )
    try:
        opts.check()
    except MtpStudioError as e:
        return die(str(e), EXIT_USAGE)
    if opts.port == 0:  # llama.cpp would not say which port it got
        opts = replace(opts, port=free_port(opts.host))
    if opts.warning:
        print(f"mtp-studio: {opts.warning}", file=sys.stderr, flush=True)
    cache = weight_cache_dir() if opts.cache else None
    print(
        f"mtp-studio: serving this machine's devices at {opts.endpoint}"
        + (f", weight cache {cache}" if cache else "")
        + "; use it with --rpc "
        + (str(opts.endpoint) if not opts.warning else f"<this machine's address>:{opts.port}")
        + ". Stop with Ctrl-C.",
        file=sys.stderr,
        flush=True,
    )
    try:
        serve_forever(
            opts.host, opts.port, threads=opts.threads or default_threads(), cache=cache, devices=list(opts.devices)
        )
    except KeyboardInterrupt:
        return EXIT_OK
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    return EXIT_OK


def run_devices(args) -> int:
    from engine.errors import MtpStudioError
    from engine.rpc.endpoints import parse_endpoints, parse_tensor_split
    from engine.runtime.load.rpcsurvey import survey_in_child

    try:
        eps = parse_endpoints(args.rpc)
        split = parse_tensor_split(args.tensor_split)
    except MtpStudioError as e:
        return die(str(e), EXIT_USAGE)
    try:
        out = survey_in_child(eps, args.model, list(split) if split else None)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    if args.json:
        print(json.dumps(out))
        return EXIT_OK
    from engine.runtime.load.placement import placed_devices

    devices, local = placed_devices(out)
    for d in devices:
        where = d.endpoint or "this machine"
        layers = f"  {d.layers:>3} layers" if d.layers is not None else ""
        print(
            f"{d.name:<8} {where:<22} {d.type:<5} {d.memory_free / 2**30:7.1f} GiB free of "
            f"{d.memory_total / 2**30:.1f}{layers}"
        )
    if local is not None:
        print(f"MTP head and output layer: {local} (this machine)")
    return EXIT_OK
