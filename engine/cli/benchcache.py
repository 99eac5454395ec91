"""``mtp-studio bench prompt-cache``: tokens decoded and prompt time per turn, with the
prompt cache and without it, and optionally llama-server's on the same conversations."""

from __future__ import annotations

import sys
from pathlib import Path


def register(bsub) -> None:
    p = bsub.add_parser(
        "prompt-cache",
        help="prompt cache: tokens decoded and prompt ms per turn with and without it (chat, two chats, agent)",
        description="Runs each scenario on two engines, the prompt cache on and off, and compares their outputs "
        "token for token. Figures: tokens decoded and prompt ms of every turn after each conversation's first.",
    )
    p.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled demo)")
    p.add_argument(
        "--template", type=Path, default=None, help="a chat template file to talk to the model with (e.g. Qwen3.5's)"
    )
    p.add_argument("--scenarios", default="chat,two,agent")
    p.add_argument("--turns", type=int, default=10, help="turns of the chat (the two chats: each; agent: 6)")
    p.add_argument("--agent-steps", type=int, default=6)
    p.add_argument("--system-words", type=int, default=1000, help="size of the shared system prompt, in words")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--cache-mb", type=int, default=None, help="the cache arm's budget (default: the app's)")
    p.add_argument("--exact", action="store_true", help="run in exact mode (bit-identity of the arms)")
    p.add_argument(
        "--llama-server",
        default=None,
        metavar="URL",
        help="also replay the cached arm's conversations to a llama-server at URL "
        "(start it on the same file with --cache-ram, --jinja and the same template)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from engine.cli import EXIT_INVALID, EXIT_USAGE, die
    from engine.errors import MtpStudioError

    if args.exact:
        from engine.runtime.llama import exact

        exact.request()
    from engine.runtime.load.loader import LoadSpec, MtpSource
    from engine.runtime.measure import promptcache as pc
    from engine.settings import DEFAULT_PROMPT_CACHE_MB
    from engine.synth.demo import demo_model_path

    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in scenarios if s not in pc.SCENARIOS]
    if bad:
        return die(f"unknown scenario {', '.join(bad)}; choose from {', '.join(pc.SCENARIOS)}", EXIT_USAGE)
    model = args.model or demo_model_path()
    template = args.template.read_text(encoding="utf-8") if args.template else None
    spec = LoadSpec(model, mtp=MtpSource.AUTO, n_ctx=args.ctx, exact=args.exact)
    budget = DEFAULT_PROMPT_CACHE_MB if args.cache_mb is None else args.cache_mb
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if not args.json else (lambda m: None)
    report: dict = {
        "model": str(model),
        "template": str(args.template) if args.template else "the model's own",
        "exact": args.exact,
        "cache_mb": budget,
        "scenarios": {},
    }
    try:
        for name in scenarios:
            turns = args.agent_steps if name == "agent" else args.turns
            kw = dict(
                turns=turns, system_words=args.system_words, max_tokens=args.max_tokens, template=template, progress=say
            )
            on = pc.run_arm(spec, budget, name, **kw)
            off = pc.run_arm(spec, 0, name, **kw)
            entry = {**pc.summary(on, off), "per_turn": {"cache": pc.turns_json(on), "no_cache": pc.turns_json(off)}}
            if args.llama_server:
                entry["llama_server"] = pc.replay_llama_server(args.llama_server, on.turns, args.max_tokens)
            report["scenarios"][name] = entry
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    if args.json:
        print(json.dumps(report))
        return 0
    for name, e in report["scenarios"].items():
        d, ms = e["later_turns_decoded"], e["later_turns_prompt_ms"]
        print(
            f"{name}: {e['turns']} turns, outputs {'identical' if e['identical'] else 'DIFFER'}; after each "
            f"conversation's first turn: decoded {d['cache']} vs {d['no_cache']} tokens, prompt "
            f"{ms['cache']} vs {ms['no_cache']} ms (x{e['prompt_ms_ratio']}); {e['snapshots']} snapshots, "
            f"{e['snapshot_bytes_per_entry'] / 2**20:.2f} MiB each"
        )
        if "llama_server" in e:
            ls = e["llama_server"]
            print(
                f"  llama-server: decoded {ls['later_turns_decoded']} tokens, prompt {ls['later_turns_prompt_ms']} ms"
            )
        for t in e["per_turn"]["cache"]:
            print(
                f"    {t['conversation']:>5}  prompt {t['prompt_tokens']:5d}  decoded {t['decoded']:5d}  "
                f"restored {t['restored']:5d}  {t['prompt_ms']:8.1f} ms"
            )
    return 0
