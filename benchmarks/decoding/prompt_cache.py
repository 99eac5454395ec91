"""Prompt-cache benchmark: what each turn of a conversation costs to bring in, with the
prompt cache and without it (``mtp-studio bench prompt-cache``).

Three scenarios, each run on one engine with the cache on and on another with it off
(budget 0), greedy, same requests:

* ``chat``: one conversation of N turns with the model's template (thinking on where the
  template thinks; Qwen3.5/3.6 re-render the last reply without its thinking);
* ``two``: two conversations taking turns, sharing a long system prompt;
* ``agent``: an agent loop — every step must call a tool, the tool's result is appended.

Per turn: prompt tokens, tokens decoded, tokens restored from a snapshot, prompt ms.
The arms' outputs are compared token for token. :func:`replay_llama_server` sends the
same conversations (with this engine's replies as history) to a running llama-server
and reads its ``timings``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.cli import EXIT_INVALID, EXIT_USAGE, die
from engine.errors import MtpStudioError
from engine.runtime import jobs as J
from engine.runtime.decode.cache.snapshotcache import CacheFigures
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.llama import exact
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.prompt.tools import ToolChoice, parse_tools
from engine.settings import DEFAULT_PROMPT_CACHE_MB
from engine.synth.demo import demo_model_path

SCENARIOS = ("chat", "two", "agent")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}},
            "required": ["city"],
        },
    },
}


def system_prompt(words: int) -> dict:
    rules = " ".join(f"Rule {i}: answer in plain words and cite rule {i} by number." for i in range(words // 11 + 1))
    return {"role": "system", "content": rules}


@dataclass
class Turn:
    conversation: str
    prompt_tokens: int
    decoded: int
    restored: int
    prompt_ms: float
    tokens: list[int] = field(repr=False)
    #: the messages (and OpenAI tools) the turn was asked with, for replaying elsewhere
    messages: list[dict] = field(repr=False, default_factory=list)
    tools: list[dict] = field(repr=False, default_factory=list)


@dataclass
class Arm:
    turns: list[Turn]
    cache: CacheFigures

    def later(self) -> list[Turn]:
        return later(self.turns, lambda t: t.conversation)


def later(turns: list, conversation: Callable[[Any], str]) -> list:
    """Every turn but each conversation's first."""
    seen: set[str] = set()
    out = []
    for t in turns:
        if conversation(t) in seen:
            out.append(t)
        seen.add(conversation(t))
    return out


def _reply_message(r: J.GenerateResult) -> dict:
    rep = r.reply
    if rep is None:
        return {"role": "assistant", "content": r.text}
    msg: dict = {"role": "assistant", "content": rep.content}
    if rep.reasoning:
        msg["reasoning_content"] = rep.reasoning
    if rep.calls:
        msg["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(rep.calls)
        ]
    return msg


def run_scenario(eng: Engine, name: str, *, turns: int, system_words: int, max_tokens: int) -> list[Turn]:
    """Run scenario ``name`` on a loaded engine; one :class:`Turn` per request."""
    out: list[Turn] = []

    def ask(conv: str, msgs: list[dict], **kw) -> J.GenerateResult:
        r = eng.submit(J.Generate(messages=list(msgs), max_tokens=max_tokens, rounds=False, **kw)).result(600)
        s = r.stats
        out.append(
            Turn(
                conv,
                s.prompt_tokens,
                s.prompt_tokens - s.prompt_tokens_reused,
                s.prompt_tokens_restored,
                round(s.prompt_ms, 2),
                list(r.tokens),
                [dict(m) for m in msgs],
                [WEATHER] if "tools" in kw else [],
            )
        )
        return r

    system = system_prompt(system_words)
    if name == "chat":
        msgs = [system]
        for t in range(turns):
            msgs.append({"role": "user", "content": f"Question {t}: what does rule {t} ask of you, and why?"})
            msgs.append(_reply_message(ask("chat", msgs)))
    elif name == "two":
        convs = {"A": [system], "B": [system]}
        for t in range(turns):
            for conv, msgs in convs.items():
                msgs.append({"role": "user", "content": f"{conv}, turn {t}: which rule matters most today?"})
                msgs.append(_reply_message(ask(conv, msgs)))
    elif name == "agent":
        tools = parse_tools([WEATHER])
        msgs = [system, {"role": "user", "content": "Plan a trip: check the weather in every city, one at a time."}]
        for step in range(turns):
            reply = _reply_message(ask("agent", msgs, tools=tools, tool_choice=ToolChoice("required")))
            msgs.append(reply)
            for c in reply.get("tool_calls", []):
                msgs.append(
                    {
                        "role": "tool",
                        "tool_call_id": c["id"],
                        "content": json.dumps({"forecast": "sunny", "high_c": 20 + step}),
                    }
                )
            if not reply.get("tool_calls"):
                msgs.append({"role": "user", "content": "Check the next city."})
    else:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    return out


def run_arm(
    spec: LoadSpec,
    budget_mb: int,
    scenario: str,
    *,
    turns: int,
    system_words: int,
    max_tokens: int,
    template: str | None,
    progress: Callable[[str], None] = lambda _m: None,
) -> Arm:
    defaults = Defaults(draft_depth=1, temperature=0.0, thinking_budget=max(8, max_tokens // 2))
    with Engine(EngineConfig(request=defaults, prompt_cache_mb=budget_mb)) as eng:
        # the template as a load option (the demo with Qwen3.5's real template)
        eng.submit(J.LoadModel(replace(spec, chat_template=template) if template else spec)).result(600)
        progress(f"{scenario}: cache {'on' if budget_mb else 'off'}")
        turns_ = run_scenario(eng, scenario, turns=turns, system_words=system_words, max_tokens=max_tokens)
        return Arm(turns_, eng.prompt_cache_info())


def summary(on: Arm, off: Arm) -> dict:
    later_on, later_off = on.later(), off.later()
    dec_on = sum(t.decoded for t in later_on)
    dec_off = sum(t.decoded for t in later_off)
    ms_on = sum(t.prompt_ms for t in later_on)
    ms_off = sum(t.prompt_ms for t in later_off)
    entries = on.cache.entries
    return {
        "identical": [t.tokens for t in on.turns] == [t.tokens for t in off.turns],
        "turns": len(on.turns),
        "later_turns_decoded": {"cache": dec_on, "no_cache": dec_off},
        "later_turns_prompt_ms": {"cache": round(ms_on, 1), "no_cache": round(ms_off, 1)},
        "prompt_ms_ratio": round(ms_off / ms_on, 2) if ms_on > 0 else None,
        "snapshots": entries,
        "snapshot_bytes_per_entry": on.cache.bytes // entries if entries else 0,
        "cache": on.cache.to_json(),
    }


# --------------------------------------------------------------- llama-server
def replay_llama_server(url: str, turns: list[Turn], max_tokens: int) -> dict:
    """Send each turn's messages to a running llama-server (greedy) and read back how many
    prompt tokens it decoded and in what time: per turn, and summed over the later turns."""
    out = []
    for t in turns:
        body = {"messages": t.messages, "max_tokens": max_tokens, "temperature": 0.0, "cache_prompt": True}
        if t.tools:
            body["tools"] = t.tools
        req = urllib.request.Request(
            url.rstrip("/") + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as resp:
            data = json.loads(resp.read())
        tm = data.get("timings", {})
        out.append(
            {
                "conversation": t.conversation,
                "prompt_tokens": data.get("usage", {}).get("prompt_tokens"),
                "decoded": tm.get("prompt_n"),
                "cache_n": tm.get("cache_n"),
                "prompt_ms": tm.get("prompt_ms"),
                "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
            }
        )
    rest = later(out, lambda t: t["conversation"])
    return {
        "per_turn": out,
        "later_turns_decoded": sum(t["decoded"] or 0 for t in rest),
        "later_turns_prompt_ms": round(sum(t["prompt_ms"] or 0 for t in rest), 1),
    }


def turns_json(arm: Arm) -> list[dict]:
    return [{k: v for k, v in asdict(t).items() if k not in ("tokens", "messages")} for t in arm.turns]


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
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
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.decoding.prompt_cache") -> int:
    args = parser(prog).parse_args(argv)
    if args.exact:
        exact.request()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        return die(f"unknown scenario {', '.join(bad)}; choose from {', '.join(SCENARIOS)}", EXIT_USAGE)
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
            on = run_arm(spec, budget, name, **kw)
            off = run_arm(spec, 0, name, **kw)
            entry = {**summary(on, off), "per_turn": {"cache": turns_json(on), "no_cache": turns_json(off)}}
            if args.llama_server:
                entry["llama_server"] = replay_llama_server(args.llama_server, on.turns, args.max_tokens)
            report["scenarios"][name] = entry
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    if args.json:
        print(json.dumps(report))
        return 0
    _print(report)
    return 0


def _print(report: dict) -> None:
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


if __name__ == "__main__":
    raise SystemExit(main())
