"""The prompt cache on a hybrid qwen35 model (delta-net layers: llama.cpp cannot cut its
state back) carrying Qwen3.5-4B's real chat template, which drops earlier turns' thinking
(tests.realtemplates fetches it): every conversation resumes where it was.

Each scenario runs twice on the same file — the cache on, and off (budget 0: the engine
as it was, which re-decodes every re-rendered or interleaved prompt) — and the outputs
must be the same tokens. The fixture's constructed weights keep the argmax far from ties,
so batch-split noise cannot flip a token; bit-identity on the trained demo in exact mode
is tested through the bench command (test_prompt_cache_bench.py)."""

from __future__ import annotations

import pytest

from engine.runtime import jobs as J
from engine.runtime.decode.cache.snapshotcache import SnapshotCache
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.runtime.prompt.tools import ToolChoice, parse_tools

SYSTEM = {"role": "system", "content": " ".join(f"Rule {i}: answer briefly and cite rule {i}." for i in range(60))}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}},
            "required": ["city"],
        },
    },
}


def _engine(model, mb: int) -> Engine:
    eng = Engine(EngineConfig(request=Defaults(draft_depth=2, max_tokens=24, thinking_budget=8), prompt_cache_mb=mb))
    eng.start()
    eng.submit(J.LoadModel(LoadSpec(model, mtp=MtpSource.INTEGRATED, n_ctx=4096))).result(60)
    return eng


@pytest.fixture(scope="module")
def engines(qwen35_template_model):
    on, off = _engine(qwen35_template_model, 64), _engine(qwen35_template_model, 0)
    yield on, off
    on.stop()
    off.stop()


def _cache(eng: Engine) -> SnapshotCache:
    def get(state, *_):
        return next(iter(state.models.values())).snapshots

    return eng.submit(J.Call(get)).result(10)


def _turn(eng: Engine, messages: list[dict], **kw) -> J.GenerateResult:
    return eng.submit(J.Generate(messages=list(messages), **kw)).result(60)


def _assistant(r: J.GenerateResult) -> dict:
    """The reply as a client sends it back: content, thinking and calls apart."""
    rep = r.reply
    assert rep is not None
    msg = {"role": "assistant", "content": rep.content, "reasoning_content": rep.reasoning}
    if rep.calls:
        msg["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(rep.calls)
        ]
    return msg


def _chat(eng: Engine, turns: int) -> list[J.GenerateResult]:
    msgs = [SYSTEM]
    out = []
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Question {t}: what does rule {t} say?"})
        r = _turn(eng, msgs)
        out.append(r)
        msgs.append(_assistant(r))
    return out


def test_a_thinking_chat_decodes_only_each_new_turn(engines):
    """Qwen3.5's template re-renders the last reply without its thinking, so each prompt
    leaves the last one at the reply's start: without snapshots the whole conversation is
    decoded again every turn."""
    on, off = engines
    _cache(on).clear()
    cached, plain = _chat(on, 4), _chat(off, 4)
    assert [r.tokens for r in cached] == [r.tokens for r in plain]
    assert all(r.stats.prompt_tokens_reused == 0 for r in plain[1:])  # the problem
    for prev, r in zip(cached, cached[1:]):
        s = r.stats
        # resumed at the previous prompt's reply start: the generation prompt is a few tokens
        assert s.prompt_tokens_restored >= prev.stats.prompt_tokens - 12
        assert s.prompt_tokens - s.prompt_tokens_reused < s.prompt_tokens - prev.stats.prompt_tokens + 12 + 40
    assert sum(r.stats.prompt_tokens - r.stats.prompt_tokens_reused for r in cached[1:]) * 3 < sum(
        r.stats.prompt_tokens for r in cached[1:]
    )


def test_two_conversations_alternating_each_resume_and_share_the_system_prompt(engines):
    on, off = engines
    cache = _cache(on)
    cache.clear()
    hits0 = cache.stats.hits
    results: dict[str, list] = {"on": [], "off": []}
    for key, eng in (("on", on), ("off", off)):
        convs = {"A": [SYSTEM], "B": [SYSTEM]}
        for t in range(3):
            for name, msgs in convs.items():
                msgs.append({"role": "user", "content": f"{name}{t}: which rule matters most today?"})
                r = _turn(eng, msgs)
                results[key].append(r)
                msgs.append(_assistant(r))
    assert [r.tokens for r in results["on"]] == [r.tokens for r in results["off"]]
    a0, b0, *later = results["on"]
    system_tokens = b0.stats.prompt_tokens_restored
    assert system_tokens > 600  # B's first prompt: A's system prompt, restored
    prev = {"A": a0, "B": b0}
    for i, r in enumerate(later):
        name = "AB"[i % 2]
        assert r.stats.prompt_tokens_restored >= prev[name].stats.prompt_tokens - 12, name
        prev[name] = r
    assert cache.stats.hits - hits0 == 5
    # the same turns without the cache decoded everything after the first
    assert all(r.stats.prompt_tokens_reused < system_tokens for r in results["off"][1:])


def test_an_agent_loop_with_tool_results_resumes_every_step(engines):
    on, off = engines
    tools = parse_tools([WEATHER])
    runs = {}
    for key, eng in (("on", on), ("off", off)):
        msgs = [SYSTEM, {"role": "user", "content": "Plan a trip: check the weather in each city."}]
        steps = []
        for step in range(4):
            r = _turn(eng, msgs, tools=tools, tool_choice=ToolChoice("required"), max_tokens=160)
            steps.append(r)
            msg = _assistant(r)
            msgs.append(msg)
            for c in msg.get("tool_calls", []):
                msgs.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": f'{{"forecast": "sunny", "step": {step}}}'}
                )
            if not msg.get("tool_calls"):
                msgs.append({"role": "user", "content": "Check another city."})
        runs[key] = steps
    assert [r.tokens for r in runs["on"]] == [r.tokens for r in runs["off"]]
    assert any(r.reply.calls for r in runs["on"])
    for prev, r in zip(runs["on"], runs["on"][1:]):
        assert r.stats.prompt_tokens_reused >= prev.stats.prompt_tokens - 12


def test_eviction_keeps_the_budget_and_the_output(qwen35_template_model, engines):
    _, off = engines
    small = _engine(qwen35_template_model, 64)
    try:
        probe = _cache(small)

        def size(state, *_):  # one snapshot of this conversation's length, measured
            s = next(iter(state.models.values())).session
            return s.snapshot().nbytes

        _turn(small, [SYSTEM, {"role": "user", "content": "Question 0: what does rule 0 say?"}])
        one = small.submit(J.Call(size)).result(10)
        budget = int(one * 2.5)

        small.set_prompt_cache_bytes(budget)
        cached, plain = _chat(small, 4), _chat(off, 4)
        assert [r.tokens for r in cached] == [r.tokens for r in plain]
        assert probe.nbytes <= budget and probe.stats.evicted > 0
        assert len(probe) <= 2
        assert any(r.stats.prompt_tokens_restored for r in cached[1:])  # still of use
    finally:
        small.stop()


def _cancelled_at(eng: Engine, messages: list[dict], phase: str, nth: int = 1) -> J.Done:
    seen = []
    h: list = []

    def hook(name: str) -> None:
        if name == phase:
            seen.append(name)
            if len(seen) == nth:
                h[0].cancel()

    h.append(eng.submit(J.Generate(messages=list(messages), phase_hook=hook)))
    final = None
    for ev in h[0].events(60):
        final = ev
    assert isinstance(final, J.Done) and final.cancelled, final
    assert len(seen) >= nth, f"never reached phase {phase!r}"
    return final


def test_cancel_during_restore_leaves_the_cache_and_contexts_consistent(engines):
    on, off = engines
    cache = _cache(on)
    cache.clear()
    conv_a = [SYSTEM, {"role": "user", "content": "A: what does rule 3 say?"}]
    conv_b = [SYSTEM, {"role": "user", "content": "B: what does rule 4 say?"}]
    _turn(on, conv_a)
    _turn(on, conv_b)  # A's state is now only in the cache
    hits = cache.stats.hits
    _cancelled_at(on, conv_a, "restore")
    assert cache.stats.hits == hits + 1
    again = _turn(on, conv_a)
    assert again.tokens == _turn(off, conv_a).tokens
    assert again.stats.prompt_tokens_reused >= again.stats.prompt_tokens - 12


def test_cancel_during_prefill_keeps_what_was_decoded_and_the_output(engines):
    on, off = engines
    cache = _cache(on)
    cache.clear()
    long = [SYSTEM, {"role": "user", "content": "Summarise every rule."}]  # ~1,700 tokens: 4 chunks
    _cancelled_at(on, long, "prefill", nth=1)
    again = _turn(on, long)
    assert again.tokens == _turn(off, long).tokens
    # the first chunk's tokens stayed in the contexts (or a snapshot): not decoded again
    assert again.stats.prompt_tokens_reused >= 512


def test_without_a_cache_a_hybrid_model_cannot_resume_an_interleaved_conversation(engines):
    """What the cache is for, pinned: the same two conversations, cache off."""
    _, off = engines
    a = [SYSTEM, {"role": "user", "content": "A: rule 1?"}]
    b = [SYSTEM, {"role": "user", "content": "B: rule 2?"}]
    ra = _turn(off, a)
    _turn(off, b)
    r2 = _turn(off, [*a, _assistant(ra), {"role": "user", "content": "and rule 5?"}])
    assert r2.stats.prompt_tokens_reused == 0 and _cache(off).stats.hits == 0


def test_cache_figures_are_reported(engines):
    on, _ = engines
    info = on.prompt_cache_info()
    assert info.budget_bytes == 64 << 20
    assert info.entries == len(_cache(on)) and 0 < info.bytes <= info.budget_bytes
    assert info.hits > 0 and info.misses > 0 and info.restored_tokens > 0


def test_a_snapshot_restores_bit_for_bit(engines):
    """Restoring gives back exactly the bytes that were saved, MTP context included."""
    on, _ = engines
    _turn(on, [SYSTEM, {"role": "user", "content": "Question 9?"}])

    def roundtrip(state, *_):
        s = next(iter(state.models.values())).session
        snap = s.snapshot()
        s.reset()
        s.restore(snap)
        again = s.snapshot()
        return (
            bytes(again.target) == bytes(snap.target)
            and bytes(again.draft) == bytes(snap.draft)
            and again.draft_tokens == snap.draft_tokens
            and s.target_tokens == snap.tokens.tolist()
        )

    assert on.submit(J.Call(roundtrip)).result(10)


def test_snapshots_are_never_restored_into_another_model(qwen35_template_model, fixtures):
    """Each loaded model has its own cache, made at load and dropped at unload: a reload
    (another file, or other settings) starts empty."""
    eng = _engine(qwen35_template_model, 64)
    try:
        _chat(eng, 2)
        assert len(_cache(eng)) > 0
        eng.submit(J.LoadModel(LoadSpec(fixtures["partial"].path, mtp=MtpSource.INTEGRATED, n_ctx=2048))).result(60)
        assert len(_cache(eng)) == 0
        r = _turn(eng, [SYSTEM, {"role": "user", "content": "Question 0: what does rule 0 say?"}])
        assert r.stats.prompt_tokens_restored == 0
    finally:
        eng.stop()


def test_an_attention_model_restores_a_conversation_another_one_pushed_out(gemma):
    """Real Gemma 3 270M (attention only: llama.cpp can cut its KV back, so no snapshots are
    taken during prefill): when a second conversation takes the context, the first one's
    state is saved, and its next turn restores it instead of decoding it again."""
    engines = {mb: Engine(EngineConfig(request=Defaults(max_tokens=12), prompt_cache_mb=mb)).start() for mb in (64, 0)}
    try:
        out = {}
        for mb, eng in engines.items():
            eng.submit(J.LoadModel(LoadSpec(gemma, n_ctx=2048))).result(120)
            a = [{"role": "user", "content": "Tell me about the sea. " * 8}]
            b = [{"role": "user", "content": "Tell me about mountains. " * 8}]
            ra = _turn(eng, a)
            _turn(eng, b)
            ra2 = _turn(eng, [*a, {"role": "assistant", "content": ra.text}, {"role": "user", "content": "More."}])
            out[mb] = (ra, ra2)
            assert (_cache(eng).stats.saved > 0) == (mb > 0)
        (a1, a2), (p1, p2) = out[64], out[0]
        assert [a1.tokens, a2.tokens] == [p1.tokens, p2.tokens]
        assert a2.stats.prompt_tokens_restored >= a1.stats.prompt_tokens
        assert p2.stats.prompt_tokens_restored == 0 and p2.stats.prompt_tokens_reused < a1.stats.prompt_tokens
    finally:
        for eng in engines.values():
            eng.stop()


def test_a_mark_on_a_batch_boundary_is_snapshotted(engines):
    """Marks every 512 tokens fall exactly where the 512-token prefill batches end: each
    still gets its snapshot (a mark there was once passed over)."""
    on, _ = engines

    def interval(n):
        def set_(state, *_):
            next(iter(state.models.values())).snapshots.interval = n

        on.submit(J.Call(set_)).result(10)

    cache = _cache(on)
    cache.clear()
    interval(512)
    try:
        r = _turn(on, [SYSTEM, {"role": "user", "content": "Which rules are about brevity?"}], mtp="off")
        assert r.stats.prompt_tokens_reused == 0 and r.stats.prompt_tokens > 1536
        assert {512, 1024, 1536} <= {s.n for s in cache.entries()}
    finally:
        interval(2048)
