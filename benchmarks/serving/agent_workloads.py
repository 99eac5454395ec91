"""What agents' work costs (``mtp-studio bench agent``): replayed agent requests with the
model's own chat template, a long prompt with and without MTP, and auto's first tokens.

**Workloads** (one chat request each; the text is this interpreter's standard library, so
every machine has the same):

* ``edit`` — a file the prompt holds, to be rewritten with three changes;
* ``quote`` — a tool result to be summarised by quoting it;
* ``json`` — a record to be echoed with one field changed;
* ``new`` — new code, with nothing in the prompt to copy.

A real model answers them as it does (Gemma 3 270M copies the file it is asked to
rewrite). A benchmark model whose answer does not depend on the prompt (``bench
make-model``: each token's successor is fixed) is measured with ``planted``: its own
answer is first decoded plainly and then put into the prompt, as the file with three
tokens changed, the quoted result, the record with one token changed — the answer then
copies its input exactly as an edit would, by construction, not by the model's skill.

Arms, in alternating rounds (this machine's speed drifts between launches): plain, MTP
auto, suffix drafts alone (MTP off), both; and with a llama-server binary, llama-server on
the same prompt tokens with ``--spec-type draft-mtp`` and ``ngram-mod,draft-mtp`` (a model
without a head: no speculation and ``ngram-mod``). Figures: tokens/s of the generation
(ours: the decode loop's time; llama-server's: its own ``timings``, so HTTP counts for
neither) and tokens per target forward.
"""

from __future__ import annotations

import inspect
import json as jsonlib
import statistics
from dataclasses import dataclass, field

import httpx2 as httpx

from engine.runtime.decode.loop import Decoded, generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.decode.session import MTP_PROMPT_WINDOW
from engine.runtime.decode.drafting.suffix import OutputStore
from engine.runtime.load.loader import LoadedModel
from engine.runtime.measure.bench import DEFAULT_PROMPTS

WORKLOADS = ("edit", "quote", "json", "new")
#: our arms: (MTP depth policy: None, "auto" or a depth; suffix drafts)
ARMS: dict[str, tuple[object, bool]] = {
    "plain": (None, False),
    "auto": ("auto", False),
    "suffix": (None, True),
    "both": ("auto", True),
}
_MARK = "\x00CONTENT\x00"


def _file(lines: int) -> str:
    import json.encoder

    return "\n".join(inspect.getsource(json.encoder).splitlines()[:lines])


def _tool_result(lines: int) -> str:
    import json.decoder

    return "\n".join(inspect.getsource(json.decoder).splitlines()[:lines])


def _record() -> str:
    rec = {f"field_{i:02d}": (f"value {i * 7 % 13}" if i % 3 else i * 37) for i in range(30)}
    rec.update(id="issue-4711", status="open", owner="mtp-studio")
    return jsonlib.dumps(rec, indent=2)


def messages(name: str, lines: int, content: str | None = None) -> list[dict]:
    """The chat request of workload ``name`` (``content``: what the prompt holds instead of
    the standard text, e.g. ``_MARK`` for a planted answer)."""
    if name == "edit":
        body = content if content is not None else _file(lines)
        text = (
            f"Here is `encoder.py`:\n\n```python\n{body}\n```\n\nRewrite the whole file with three changes: "
            "rename `chunks` to `parts`, rename `_one_shot` to `single_pass`, and make `indent` default to 4. "
            "Output only the code."
        )
    elif name == "quote":
        body = content if content is not None else _tool_result(lines)
        text = (
            f"The tool `read_file` returned:\n\n{body}\n\nSummarise it for the user, quoting the lines that "
            "matter verbatim."
        )
    elif name == "json":
        body = content if content is not None else _record()
        text = f'Here is a record:\n\n{body}\n\nReturn the same record with `status` set to "closed". Output only JSON.'
    elif name == "new":
        text = (
            "Write a new Python module implementing a small least-recently-used cache class with a capacity, "
            "get and put methods, docstrings and a few doctests."
        )
    else:
        raise ValueError(f"unknown workload {name!r}")
    return [{"role": "user", "content": text}]


def render(lm: LoadedModel, msgs: list[dict]) -> str:
    m = lm.model
    return lm.template.render(
        msgs,
        bos_token=m.token_text(m.bos) if m.add_bos and m.bos >= 0 else "",
        eos_token=m.token_text(m.eos) if m.eos >= 0 else "",
    )


def prompt_tokens(lm: LoadedModel, name: str, lines: int, planted: list[int] | None = None) -> list[int]:
    """The workload's prompt tokens; with ``planted`` (the model's own answer) the prompt
    holds that answer, changed as the workload changes it."""
    m = lm.model
    if planted is None or name == "new":
        return m.prompt_tokens(render(lm, messages(name, lines)))
    before, after = render(lm, messages(name, lines, _MARK)).split(_MARK)
    body = list(planted)
    changes = {"edit": 3, "json": 1}.get(name, 0)
    for j in range(1, changes + 1):  # one token changed at evenly spaced places
        i = len(body) * j // (changes + 1)
        body[i] = (body[i] + 1) % m.n_vocab
    return m.prompt_tokens(before) + body + m.tokenize(after)


@dataclass
class Run:
    tokens: list[int]
    tokens_per_second: float
    forwards: int
    drafted: int = 0
    accepted: int = 0

    @property
    def per_forward(self) -> float:
        return len(self.tokens) / self.forwards if self.forwards else 0.0


@dataclass
class Arm:
    name: str
    runs: list[Run] = field(default_factory=list)

    def summary(self) -> dict:
        tps = [r.tokens_per_second for r in self.runs]
        last = self.runs[-1]
        return {
            "tokens": len(last.tokens),
            "tokens_per_second": statistics.median(tps),
            "tokens_per_second_all": [round(x, 1) for x in tps],
            "tokens_per_forward": last.per_forward,
            "drafted": last.drafted,
            "accepted": last.accepted,
        }


def run_ours(
    lm: LoadedModel,
    prompt: list[int],
    arm: str,
    max_tokens: int,
    policy: AdaptiveDepth | None,
    outputs: OutputStore | None = None,
) -> Run:
    depth, suffix = ARMS[arm]
    if depth is not None and lm.session.draft is None:
        raise ValueError(f"arm {arm!r} needs an MTP head")
    p = policy if depth == "auto" else (FixedDepth(int(depth)) if depth is not None else None)  # type: ignore[arg-type]
    lm.session.reset()
    g: Decoded = generate(
        lm.session,
        prompt,
        DecodeParams(max_tokens=max_tokens, depth=p, suffix_drafts=suffix),
        outputs=outputs if suffix else None,
    )
    st = g.stats
    return Run(
        g.tokens, len(g.tokens) / max(st.generation_ms, 1e-6) * 1000, st.target_forwards, st.drafted, st.accepted
    )


def run_llama_server(url: str, prompt: list[int], max_tokens: int) -> Run:
    body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False, "return_tokens": True}
    r = httpx.post(url + "/completion", json=body, timeout=3600).json()
    t = r.get("timings", {})
    n = int(t.get("predicted_n", 0))
    accepted = int(t.get("draft_n_accepted", 0) or 0)
    return Run(
        list(r.get("tokens") or []),
        float(t.get("predicted_per_second", 0.0)),
        max(n - accepted, 1),
        int(t.get("draft_n", 0) or 0),
        accepted,
    )


def llama_server_arms(has_head: bool, depth: int) -> dict[str, list[str]]:
    if has_head:
        mtp = ["--spec-draft-n-max", str(depth)]
        return {
            "llama-server draft-mtp": ["--spec-type", "draft-mtp", *mtp],
            "llama-server ngram-mod,draft-mtp": ["--spec-type", "ngram-mod,draft-mtp", *mtp],
        }
    return {"llama-server plain": [], "llama-server ngram-mod": ["--spec-type", "ngram-mod"]}


def workloads(
    lm: LoadedModel,
    names: list[str],
    arms: list[str],
    *,
    lines: int,
    max_tokens: int,
    rounds: int,
    planted: bool,
    servers: dict[str, str],
) -> dict:
    """Every workload under every arm, ``rounds`` alternating rounds after a warm-up."""
    out: dict[str, dict] = {}
    answer = None
    if planted:  # the model's own answer, decoded once without speculation
        lm.session.reset()
        seed = prompt_tokens(lm, "new", lines)
        answer = generate(lm.session, seed, DecodeParams(max_tokens=max_tokens, ignore_eog=True)).tokens
    policy = AdaptiveDepth(lm.max_draft_depth) if lm.session.draft is not None else None
    # each suffix arm keeps its recent outputs over the whole run, as one llama-server
    # process keeps its n-gram pool over every request it serves
    stores = {a: OutputStore() for a in arms}
    for name in names:
        prompt = prompt_tokens(lm, name, lines, answer)
        results = {a: Arm(a) for a in [*arms, *servers]}
        for r in range(rounds + 1):
            for a in results:
                run = (
                    run_llama_server(servers[a], prompt, max_tokens)
                    if a in servers
                    else run_ours(lm, prompt, a, max_tokens, policy, stores[a])
                )
                if r:  # round 0 warms every arm up
                    results[a].runs.append(run)
        ours = [results[a].runs[-1].tokens for a in arms]
        summaries = {a: arm.summary() for a, arm in results.items()}
        for a in servers:  # how far llama-server's greedy output agrees with ours
            theirs = results[a].runs[-1].tokens
            same = next((i for i, (x, y) in enumerate(zip(theirs, ours[0])) if x != y), min(len(theirs), len(ours[0])))
            summaries[a]["same_prefix"] = same
        out[name] = {"prompt_tokens": len(prompt), "identical": all(t == ours[0] for t in ours), "arms": summaries}
    return out


# ------------------------------------------------------------------ long prompts
def long_prompt(lm: LoadedModel, n: int) -> list[int]:
    """``n`` tokens of real text (the standard library's source, as a user message)."""
    import email
    import json
    import logging

    text = "".join(inspect.getsource(mod) for mod in (json.encoder, json.decoder, logging, email.message))
    m = lm.model
    toks = m.tokenize(text)
    while len(toks) < n:
        toks = toks + toks
    return m.with_bos(toks[: n - 1])


def prompt_cost(lm: LoadedModel, n: int, *, rounds: int, max_tokens: int, depth: int = 2) -> dict:
    """Prompt time of an ``n``-token prompt: MTP off, MTP with the head's prompt window,
    MTP feeding the head every position; and the acceptance of the next ``max_tokens``."""
    prompt = long_prompt(lm, n)
    s = lm.session
    arms = {"mtp off": None, f"mtp, window {s.window(len(prompt))}": MTP_PROMPT_WINDOW, "mtp, whole prompt": 1 << 30}
    times: dict[str, list[float]] = {a: [] for a in arms}
    acceptance: dict[str, float] = {}
    tokens: dict[str, list[int]] = {}
    for r in range(rounds + 1):
        for a, window in arms.items():
            s.reset()
            s.prompt_window = window or MTP_PROMPT_WINDOW
            try:
                g = generate(
                    s,
                    prompt,
                    DecodeParams(max_tokens=max_tokens, ignore_eog=True, depth=FixedDepth(depth) if window else None),
                )
            finally:
                s.prompt_window = MTP_PROMPT_WINDOW
            if r:
                times[a].append(g.stats.prompt_ms)
            tokens[a] = g.tokens
            acceptance[a] = g.stats.accepted / g.stats.drafted if g.stats.drafted else 0.0
    base = statistics.median(times["mtp off"])
    return {
        "prompt_tokens": len(prompt),
        "depth": depth,
        "generated": max_tokens,
        "identical": all(t == tokens["mtp off"] for t in tokens.values()),
        "arms": {
            a: {
                "prompt_ms": statistics.median(v),
                "prompt_ms_all": [round(x) for x in v],
                "vs_off": statistics.median(v) / base,
                "acceptance": acceptance[a] if arms[a] else None,
            }
            for a, v in times.items()
        },
    }


# ---------------------------------------------------------------------- cold start
def cold_start(lm: LoadedModel, *, sessions: int, tokens: int, lines: int) -> dict:
    """Auto from a fresh policy over the first ``tokens`` tokens, ``sessions`` times, next
    to plain decoding and every fixed depth run over the same requests in the same round."""
    # the A/B benchmark's prompts (``mtp-studio bench``), as a session's first requests
    prompts = [lm.model.prompt_tokens(p) for p in DEFAULT_PROMPTS]
    arms = ["plain", *(str(d) for d in range(1, lm.max_draft_depth + 1)), "auto"]
    per: dict[str, list[float]] = {a: [] for a in arms}
    s = lm.session
    for _ in range(sessions):
        policies = {a: None if a == "plain" else FixedDepth(int(a)) if a.isdigit() else None for a in arms}
        policies["auto"] = AdaptiveDepth(lm.max_draft_depth)  # as for a model with no saved policy
        done = {a: 0 for a in arms}
        ms = {a: 0.0 for a in arms}
        i = 0
        while min(done.values()) < tokens:  # request by request, every arm in turn: the machine's
            for a in arms:  # speed drifts within seconds here, so arms alternate finely
                if done[a] >= tokens:
                    continue
                s.reset()
                g = generate(
                    s,
                    prompts[i % len(prompts)],
                    DecodeParams(max_tokens=min(96, tokens - done[a]), ignore_eog=True, depth=policies[a]),
                )
                done[a] += len(g.tokens)
                ms[a] += g.stats.generation_ms
            i += 1
        for a in arms:
            per[a].append(done[a] / ms[a] * 1000)
    med = {a: statistics.median(v) for a, v in per.items()}
    best_fixed = max((a for a in arms if a.isdigit()), key=med.__getitem__)
    ratio_plain = [x / y for x, y in zip(per["auto"], per["plain"])]
    ratio_best = [x / y for x, y in zip(per["auto"], per[best_fixed])]
    return {
        "sessions": sessions,
        "tokens": tokens,
        "tokens_per_second": {a: [round(x, 1) for x in v] for a, v in per.items()},
        "best_fixed": best_fixed,
        "auto_vs_plain": [round(x, 3) for x in ratio_plain],
        "auto_vs_best_fixed": [round(x, 3) for x in ratio_best],
    }


def source_text_digest() -> str:
    """Which standard library the workloads' text came from (figures compare only alike)."""
    import hashlib
    import json.encoder

    return hashlib.sha256(inspect.getsource(json.encoder).encode()).hexdigest()[:12]
