"""``mtp-studio backend detect | plan | build | list | use | smoke``."""

from __future__ import annotations

import json
import sys

from engine.cli import EXIT_INVALID, EXIT_OK, die


def register(sub) -> None:
    p = sub.add_parser("backend", help="detect hardware, plan/build/select the llama.cpp backend")
    bsub = p.add_subparsers(dest="backend_command", metavar="ACTION", required=True)

    d = bsub.add_parser("detect", help="hardware, toolkit, and the backend in use")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_detect)

    pl = bsub.add_parser("plan", help="which build to use, why, and its CMAKE_ARGS")
    pl.add_argument("--backend", choices=["metal", "cuda", "cpu"])
    pl.add_argument("--portable", action="store_true", help="CUDA: also the toolkit's default architectures")
    pl.add_argument(
        "--exact", action="store_true", help="the batch-invariant CPU build (exact mode for F16/F32 models)"
    )
    pl.add_argument("--rpc", action="store_true", help="with llama.cpp's RPC backend: lend this machine, use others")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=run_plan)

    b = bsub.add_parser("build", help="build llama-cpp-python for this machine into its own folder")
    b.add_argument("--backend", choices=["metal", "cuda", "cpu"])
    b.add_argument("--portable", action="store_true")
    b.add_argument("--exact", action="store_true", help="the batch-invariant CPU build (exact mode for F16/F32 models)")
    b.add_argument("--rpc", action="store_true", help="with llama.cpp's RPC backend: lend this machine, use others")
    b.add_argument("--name")
    b.add_argument("--no-use", action="store_true", help="do not select the build after its smoke test passes")
    b.set_defaults(func=run_build)

    ls = bsub.add_parser("list", help="builds on disk, their smoke tests, the one selected")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)

    u = bsub.add_parser("use", help="select a build ('installed' for the library installed with the app)")
    u.add_argument("name")
    u.add_argument("--force", action="store_true", help="select even without a passing smoke test")
    u.set_defaults(func=run_use)

    s = bsub.add_parser("smoke", help="prove a build: load the demo model on it, decode, report the devices")
    s.add_argument("name", nargs="?", default=None, help="build name (default: the one in use)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_smoke_cmd)


def _in_use() -> dict:
    from engine.backends.builds import load_manifest, selected_lib_dir
    from engine.runtime.llama.devices import list_devices, loaded_lib_dir

    m = load_manifest()
    info = {"build": m.selected or "installed", "selected_lib_dir": selected_lib_dir()}
    try:
        info["lib_dir"] = str(loaded_lib_dir())
        devices = list_devices()
        info["devices"] = [d.to_json() for d in devices]
    except Exception as e:  # a broken build must not break detection
        info["error"] = f"cannot load the backend library: {e}"
    try:
        from engine.runtime.load.rpcdevices import rpc_available

        info["rpc"] = rpc_available()
    except Exception:
        info["rpc"] = False
    info["backend"] = "gpu" if "error" not in info and any(d.gpu for d in devices) else "cpu"
    if "error" not in info:
        from engine.runtime.llama.repack import verdict

        info["repack"] = verdict().to_json()  # remembered, or probed once for this CPU and build
    return info


def run_detect(args) -> int:
    from engine.backends.detect import detect

    d = detect().to_json()
    d["in_use"] = _in_use()
    if args.json:
        print(json.dumps(d))
        return EXIT_OK
    print(f"OS            {d['os']} {d['arch']}")
    print(f"CPU           {d['cpu']} ({', '.join(d['cpu_features']) or 'no SIMD features detected'})")
    if d["memory_bytes"]:
        print(f"memory        {d['memory_bytes'] / 2**30:.1f} GiB")
    if d["apple_silicon"]:
        print("Apple Silicon yes (Metal)")
    for g in d["gpus"]:
        mem = f", {g['memory_mib']} MiB" if g["memory_mib"] else ""
        print(f"GPU           {g['name']} (compute capability {g['compute_capability']}{mem})")
    tk = d["toolkit"]
    if tk["version"]:
        label = " (driver's CUDA version: no compiler found)" if tk["source"] == "driver" else f" from {tk['source']}"
        print(f"CUDA toolkit  {tk['version']}{label}")
    use = d["in_use"]
    devices = ", ".join(f"{x['name']} ({x['type']})" for x in use.get("devices", [])) or use.get("error", "?")
    print(f"in use        build {use['build']}: {devices}; RPC {'built in' if use.get('rpc') else 'not built in'}")
    if (rp := use.get("repack")) is not None:
        print(
            f"repacking     {'on' if rp['allowed'] else 'off'}"
            + (f": {rp['reason']}" if rp["reason"] else ": llama.cpp's repacked CPU kernels ran on this CPU")
        )
    for e in d["errors"]:
        print(f"note          {e}")
    return EXIT_OK


def run_plan(args) -> int:
    from engine.backends.detect import detect
    from engine.backends.plan import make_plan

    plan = make_plan(detect(), backend=args.backend, portable=args.portable, exact=args.exact, rpc=args.rpc)
    if args.json:
        print(json.dumps(plan.to_json()))
        return EXIT_OK
    print(f"backend     {plan.backend}{' + RPC' if plan.rpc else ''}")
    print(f"CMAKE_ARGS  {plan.cmake_args or '(none: llama.cpp defaults, tuned for this CPU)'}")
    for r in plan.reasons:
        print(f"why         {r}")
    for p in plan.problems:
        print(f"PROBLEM     {p}")
    return EXIT_OK


def run_build(args) -> int:
    from engine.backends import builds
    from engine.backends.detect import detect
    from engine.backends.plan import make_plan
    from engine.errors import Cancelled, MtpStudioError
    from engine.runtime.load.buildcheck import run_smoke

    plan = make_plan(detect(), backend=args.backend, portable=args.portable, exact=args.exact, rpc=args.rpc)
    for p in plan.problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    if args.backend and plan.backend != args.backend:
        return die(f"a {args.backend} build is not possible here (see above)", EXIT_INVALID)
    print(f"building {plan.backend} with CMAKE_ARGS='{plan.cmake_args}'", file=sys.stderr)
    try:
        b = builds.build(plan, name=args.name, log=lambda line: print(line, file=sys.stderr))
    except Cancelled:
        return die("cancelled; nothing was installed", EXIT_INVALID)
    except (KeyboardInterrupt, MtpStudioError) as e:
        return die(str(e) or "interrupted", EXIT_INVALID)
    report = run_smoke(plan.backend, str(b.lib_dir))
    builds.record_smoke(b.name, report)
    print(f"build {b.name}: smoke test {'passed' if report['ok'] else 'FAILED'}: {report['message']}")
    if not report["ok"]:
        return EXIT_INVALID
    if not args.no_use:
        builds.use(b.name)
        print(f"selected {b.name}")
    return EXIT_OK


def run_list(args) -> int:
    from engine.backends.builds import load_manifest

    m = load_manifest()
    rows = [{"name": "installed", "backend": "(as installed)", "selected": m.selected is None, "smoke": None}]
    rows += [{**b.__dict__, "selected": m.selected == b.name} for b in m.builds]
    if args.json:
        print(json.dumps({"selected": m.selected or "installed", "builds": rows}))
        return EXIT_OK
    for r in rows:
        mark = "*" if r["selected"] else " "
        smoke = r.get("smoke")
        status = "" if smoke is None else ("smoke ok" if smoke.get("ok") else f"smoke FAILED: {smoke.get('message')}")
        print(f"{mark} {r['name']:<32} {r['backend']:<14} {status}")
    return EXIT_OK


def run_use(args) -> int:
    from engine.backends import builds
    from engine.errors import MtpStudioError

    if args.name == "installed":
        m = builds.load_manifest()
        m.selected = None
        builds.save_manifest(m)
        print("using the llama-cpp-python library installed with the app")
        return EXIT_OK
    try:
        b = builds.use(args.name, force=args.force)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    print(f"using {b.name} ({b.backend}) from {b.lib_dir}")
    return EXIT_OK


def run_smoke_cmd(args) -> int:
    from engine.backends import builds
    from engine.runtime.load.buildcheck import run_smoke

    m = builds.load_manifest()
    name = args.name or m.selected
    if name in (None, "installed"):
        report = run_smoke("cpu", None)
        name = "installed"
    else:
        b = m.get(name)
        if b is None:
            return die(f"no build named {name!r}", EXIT_INVALID)
        report = run_smoke(b.backend, str(b.lib_dir))
        builds.record_smoke(name, report)
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{name}: {'ok' if report['ok'] else 'FAILED'}: {report['message']}")
    return EXIT_OK if report["ok"] else EXIT_INVALID
