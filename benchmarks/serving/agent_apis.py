"""An agent's first turn and its second, through each API: time to first token and total
time for a long first prompt (instructions and tool definitions, as agents send) and the
turn after it (the prompt cache resumes it), MTP auto against off; and llama-server on the
same file, where a binary is given. Prints figures; not a test.

    python -m benchmarks.serving.agent_apis [--server PATH/llama-server] [--model M] [--tokens N] [--ctx N]

The bundled demo was trained with a 4,096-token context, which caps what it loads with, so
on it the first prompt is 3,500 tokens by default; give a model with a longer training
context (``--model``) for Claude Code's ~18k (``--tokens 18000 --ctx 65536``).

Every first prompt starts with its own line, so no run reuses another's prompt; the second
turn re-sends the first with the reply and one more user message.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from benchmarks.serving.servers import ServerError, ServerProcess
from engine.synth.demo import demo_model_path

APIS = ("chat", "responses", "messages", "ollama")
#: one block of an agent's instructions and tools (repeated to the size asked)
BLOCK = (
    "You are a coding agent working in a repository. Read files before you change them, keep "
    "changes small, run the tests after each change and report what you did.\n"
    'Tool "read_file": {"type": "object", "properties": {"path": {"type": "string"}, '
    '"offset": {"type": "integer"}, "limit": {"type": "integer"}}, "required": ["path"]}\n'
    'Tool "run": {"type": "object", "properties": {"command": {"type": "string"}, '
    '"timeout_s": {"type": "integer"}}, "required": ["command"]}\n'
    "def apply_patch(path, old, new):\n    text = open(path).read()\n    assert old in text\n"
    "    open(path, 'w').write(text.replace(old, new, 1))\n\n"
)


def _post(url: str, body: dict) -> tuple[float, float, str]:
    """(seconds to the first token, seconds to the end, the reply's text) of a stream."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, text = None, []
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data: "):
                line = line[6:]
            if not line or line.startswith((":", "event:")) or line == "[DONE]":
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            piece = _piece(ev)
            if piece:
                first = first or time.perf_counter()
                text.append(piece)
    end = time.perf_counter()
    return (first or end) - t0, end - t0, "".join(text)


def _piece(ev: dict) -> str:
    """The reply text (or thinking) an event carries, in any of the four APIs."""
    if "choices" in ev and ev["choices"]:
        d = ev["choices"][0].get("delta") or {}
        return d.get("content") or d.get("reasoning_content") or ""
    kind = ev.get("type", "")
    if kind in ("response.output_text.delta", "response.reasoning_text.delta"):
        return ev.get("delta", "")
    if kind == "content_block_delta":
        d = ev.get("delta", {})
        return d.get("text") or d.get("thinking") or ""
    if "message" in ev and isinstance(ev["message"], dict) and not ev.get("done"):
        return ev["message"].get("content") or ev["message"].get("thinking") or ""
    return ""


def _body(api: str, model: str, system: str, turns: list[dict], n: int, mtp: str | None) -> tuple[str, dict]:
    extra = {"mtp": mtp} if mtp else {}
    if api == "chat":
        return "/v1/chat/completions", {
            "model": model,
            "stream": True,
            "max_tokens": n,
            "temperature": 0,
            "messages": [{"role": "system", "content": system}, *turns],
            **extra,
        }
    if api == "responses":
        return "/v1/responses", {
            "model": model,
            "stream": True,
            "max_output_tokens": n,
            "temperature": 0,
            "instructions": system,
            "input": turns,
            "store": False,
            **extra,
        }
    if api == "messages":
        return "/v1/messages", {
            "model": model,
            "stream": True,
            "max_tokens": n,
            "temperature": 0,
            "system": system,
            "messages": turns,
            **extra,
        }
    return "/api/chat", {
        "model": model,
        "stream": True,
        "options": {"num_predict": n, "temperature": 0},
        "messages": [{"role": "system", "content": system}, *turns],
        **extra,
    }


def _system(tokens: int, count) -> str:
    text = BLOCK
    while count(text) < tokens:
        text += BLOCK
    return text


def run_arm(base: str, model: str, api: str, system: str, n: int, mtp: str | None) -> dict:
    try:
        return _turns(base, model, api, system, n, mtp)
    except urllib.error.HTTPError as e:
        return {"error": f"HTTP {e.code}: {e.read().decode('utf-8', 'replace')[:200]}"}


def _turns(base: str, model: str, api: str, system: str, n: int, mtp: str | None) -> dict:
    nonce = f"Session {uuid.uuid4().hex}.\n"
    turns = [{"role": "user", "content": "Fix the failing test in tests/test_parse.py."}]
    path, body = _body(api, model, nonce + system, turns, n, mtp)
    t1, total1, reply = _post(base + path, body)
    turns2 = [*turns, {"role": "assistant", "content": reply}, {"role": "user", "content": "Now run the tests."}]
    path, body = _body(api, model, nonce + system, turns2, n, mtp)
    t2, total2, _ = _post(base + path, body)
    return {"ttft_1": t1, "total_1": total1, "ttft_2": t2, "total_2": total2}


def _measure(a: argparse.Namespace, system: str) -> list[tuple[str, str, str, dict]]:
    """Both turns through every API, ours with MTP auto and off, then llama-server's."""
    rows = []
    with ServerProcess.ours(a.model, ["--ctx", str(a.ctx)]) as ours:
        model = ours.model_name()
        for api in APIS:
            for mtp in ("on", "off"):
                arm = run_arm(ours.url, model, api, system, a.max_tokens, mtp)
                rows.append(("ours", api, "auto" if mtp == "on" else "off", arm))
    if a.server is not None:
        args = ["-c", str(a.ctx), "-np", "1", "--jinja"]
        with ServerProcess.llama_server(str(a.server), a.model, args) as theirs:
            for api in ("chat", "responses", "messages"):
                rows.append(
                    ("llama-server", api, "off", run_arm(theirs.url, a.model.stem, api, system, a.max_tokens, None))
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", type=Path, help="a llama-server binary built from the vendored llama.cpp")
    ap.add_argument("--model", type=Path, default=demo_model_path())
    ap.add_argument("--tokens", type=int, default=3500, help="size of the first prompt's instructions")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=4096)
    a = ap.parse_args(argv)
    from engine.runtime.llama.model import Model

    vocab = Model.load(a.model, load_mtp=False, metadata_only=True)
    count = lambda t: len(vocab.tokenize(t))  # noqa: E731
    system = _system(a.tokens, count)
    print(f"first prompt: {count(system)} tokens of instructions; {a.max_tokens} tokens a reply; context {a.ctx}")
    try:
        rows = _measure(a, system)
    except ServerError as e:
        raise SystemExit(str(e)) from None
    print(f"{'server':13} {'API':10} {'MTP':5} {'TTFT 1':>8} {'total 1':>8} {'TTFT 2':>8} {'total 2':>8}   (seconds)")
    for who, api, mtp, r in rows:
        if "error" in r:
            print(f"{who:13} {api:10} {mtp:5} {r['error']}")
            continue
        print(
            f"{who:13} {api:10} {mtp:5} {r['ttft_1']:8.2f} {r['total_1']:8.2f} {r['ttft_2']:8.2f} {r['total_2']:8.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
