"""Every MTP family llama.cpp can run, on tiny fixtures laid out by llama.cpp itself
(tests.synth.families): load, MTP decoding at depths 1-3 and auto identical to plain
decoding, MTP off, chained heads, separate heads (compose where the family ships them
so, attach where it does not), and a refusal in words wherever llama.cpp would abort."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest

from engine.errors import ComposeError, GGUFError, MtpUnavailableError, PairingError
from engine.gguf.compose import compose
from engine.gguf.pairing import Summary, check_pair
from engine.gguf.shards import open_set
from engine.gguf.validate import validate_path
from engine.runtime.decode.cache.snapshotcache import SnapshotCache
from engine.runtime.decode.entries import HOLE
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from engine.runtime.load.source import nextn_load_failure

#: families whose MTP layers ship inside the model file (and draft)
INTEGRATED = (
    "qwen35moe",
    "qwen3next",
    "glm4moe",
    "deepseek2",
    "deepseek32",
    "glm-dsa",
    "bailingmoe3",
    "cohere2moe",
    "nemotron_h_moe",
    "step35",
    "mimo2",
    "hy_v3",
)
PROMPT = "Hello! How are you today? Tell me a story about a cat."


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """Written in a child process: laying out a model from metadata runs llama.cpp."""
    out = tmp_path_factory.mktemp("families")
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.synth.families", str(out)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load(path, mtp, head=None, depth=3):
    return load(LoadSpec(path, head=head, mtp=mtp, n_ctx=256, probe=False, fit="off", max_draft_depth=depth))


@contextmanager
def _loaded(path, mtp, head=None, depth=3):
    lm = _load(path, mtp, head, depth)
    try:
        yield lm
    finally:
        lm.close()


def _plain(lm) -> list[int]:
    lm.session.reset()
    return generate(lm.session, lm.model.prompt_tokens(PROMPT), DecodeParams(max_tokens=32, ignore_eog=True)).tokens


def _runs(lm, depths=(1, 2, 3)):
    """Plain tokens, then (tokens, drafted, accepted) at each depth and under auto."""
    plain = _plain(lm)
    prompt = lm.model.prompt_tokens(PROMPT)
    out = {}
    for d in (*depths, "auto"):
        lm.session.reset()
        policy = AdaptiveDepth(lm.max_draft_depth) if d == "auto" else FixedDepth(d)
        g = generate(lm.session, prompt, DecodeParams(max_tokens=32, ignore_eog=True, depth=policy))
        out[d] = (g.tokens, g.stats.drafted, g.stats.accepted)
    return plain, out


@pytest.mark.parametrize("fam", INTEGRATED)
def test_integrated_family_drafts_and_matches_plain(families, fam):
    with _loaded(families[fam]["target"], MtpSource.INTEGRATED) as lm:
        assert lm.source == MtpSource.INTEGRATED
        plain, runs = _runs(lm)
        assert len(plain) == 32
        for depth, (tokens, drafted, accepted) in runs.items():
            assert tokens == plain, f"{fam} depth {depth}"
            if depth != "auto":
                assert drafted > 0 and accepted > 0, f"{fam} depth {depth}: {accepted}/{drafted}"
    with _loaded(families[fam]["target"], MtpSource.OFF) as off:  # MTP off loads every integrated file
        assert _plain(off) == plain


@pytest.mark.parametrize("fam", ("step35", "mimo2", "hy_v3"))
def test_chained_heads_cap_the_depth_at_their_count_and_draft_as_deep_exactly(families, fam):
    f = families[fam]
    heads = f["n_nextn"]
    assert heads > 1
    with _loaded(f["target"], MtpSource.INTEGRATED, depth=4) as lm:
        assert lm.info.drafting == "chain" and lm.session.heads == heads
        assert lm.max_draft_depth == heads  # capped at the head count
        plain, runs = _runs(lm, depths=(heads,))
        tokens, drafted, accepted = runs[heads]
        assert tokens == plain and accepted > 0
        # drafts come in rounds of at most `heads` tokens
        assert drafted <= heads * len(plain)


@pytest.mark.parametrize("fam", ("qwen35moe", "glm4moe", "deepseek2", "step35"))
def test_split_head_composes_into_the_integrated_model(families, fam, tmp_path):
    f = families[fam]
    trunk = validate_path(f["trunk"])[1]
    head = validate_path(f["head"])[1]
    assert (trunk.kind, head.kind) == ("none", "head-only")
    composed = compose(f["trunk"], f["head"], tmp_path / "composed.gguf").outputs[0]
    with _loaded(f["target"], MtpSource.OFF) as ref:
        want = _plain(ref)
    with _loaded(composed, MtpSource.INTEGRATED) as lm:
        plain, runs = _runs(lm, depths=(2,))
        assert plain == want and runs[2][0] == want and runs[2][2] > 0
    # the same head attached instead of composed drafts the same
    with _loaded(f["trunk"], MtpSource.EXTERNAL, head=f["head"]) as ext:
        _, ext_runs = _runs(ext, depths=(2,))
        assert ext_runs[2][0] == want and ext_runs[2][2] > 0


def test_trunk_only_target_loads_and_takes_its_head(families):
    f = families["glm4moe"]  # its loader accepts a trunk that declares NextN layers without them
    facts = validate_path(f["trunk_only"])[1]
    assert facts.kind == "trunk-only"
    with _loaded(f["trunk_only"], MtpSource.AUTO) as auto:
        assert auto.source == MtpSource.OFF
    with pytest.raises(MtpUnavailableError, match="separate mtp"):
        _load(f["trunk_only"], MtpSource.INTEGRATED)
    with _loaded(f["trunk_only"], MtpSource.EXTERNAL, head=f["head"]) as lm:
        plain, runs = _runs(lm, depths=(1,))
        assert runs[1][0] == plain and runs[1][2] > 0
    # qwen35moe's loader does not: refused in words before llama.cpp fails on it
    report = validate_path(families["qwen35moe"]["trunk_only"])[0]
    assert "trunk_only_unsupported" in {e.code for e in report.errors}


def test_deepseek4_head_attaches_with_its_own_output_tensors(families, tmp_path):
    f = families["deepseek4"]
    head = open_set(f["head"])
    roots = {t.name for _, t in head.all_tensors() if not t.name.startswith("blk.")}
    assert {"output_hc_fn.weight", "output_hc_base.weight", "output_hc_scale.weight"} <= roots
    assert validate_path(f["head"])[0].valid
    with pytest.raises(ComposeError, match="Attach the head") as e:
        compose(f["target"], f["head"], tmp_path / "v4.gguf")
    assert e.value.code == "separate_head" and not (tmp_path / "v4.gguf").exists()
    with _loaded(f["target"], MtpSource.EXTERNAL, head=f["head"]) as lm:
        assert lm.source == MtpSource.EXTERNAL
        plain, runs = _runs(lm)
        for depth, (tokens, drafted, accepted) in runs.items():
            assert tokens == plain, depth
        assert runs[1][1] > 0 and runs[1][2] > 0


def test_gemma4_assistant_is_recognised_and_paired(families):
    f = families["gemma4"]
    report, facts, _ = validate_path(f["head"])
    assert report.valid, report.errors
    assert facts.kind == "assistant" and facts.architecture == "gemma4-assistant"
    target = Summary.of_set(open_set(f["target"]))
    pairing = check_pair(target, Summary.of_set(open_set(f["head"])))
    assert pairing.nextn_layers == f["n_nextn"]
    with pytest.raises(PairingError) as e:  # an assistant is for its own target family
        check_pair(Summary.of_set(open_set(families["qwen35moe"]["target"])), Summary.of_set(open_set(f["head"])))
    assert e.value.code == "architecture_mismatch"
    with pytest.raises(PairingError, match="assistant"):  # and a gemma4 target pairs with nothing else
        check_pair(target, Summary.of_set(open_set(families["qwen35moe"]["head"])))
    with pytest.raises(MtpUnavailableError, match="assistant"):
        _load(f["head"], MtpSource.AUTO)
    with _loaded(f["target"], MtpSource.OFF) as off:
        assert off.source == MtpSource.OFF


def test_gemma4_assistant_drafts_over_the_targets_kv_cache(families):
    """llama.cpp's shared-memory mode: the assistant keeps no KV cache of its own, nothing
    is fed into it, and every draft of a round sits at the position after the target's."""
    f = families["gemma4"]
    with _loaded(f["target"], MtpSource.AUTO, head=f["head"]) as lm:
        assert lm.source == MtpSource.EXTERNAL and lm.info.drafting == "shared" and lm.session.shared
        plain, runs = _runs(lm)
        for depth, (tokens, drafted, accepted) in runs.items():
            assert tokens == plain, depth
            if depth != "auto":
                assert drafted > 0 and accepted > 0, (depth, accepted, drafted)
        assert lm.session.draft_tokens == []  # no entries: the head reads the target's cache
        assert runs[3][1] > runs[1][1]  # deeper rounds draft more

        # the prompt cache restores the target; the assistant, holding nothing, follows it
        s = lm.session
        prompt = lm.model.prompt_tokens(PROMPT)
        cache = SnapshotCache(64 << 20, interval=8)
        s.reset()
        params = DecodeParams(max_tokens=16, ignore_eog=True, depth=FixedDepth(2))
        first = generate(s, prompt, params, cache=cache).tokens
        generate(s, lm.model.prompt_tokens("Something else entirely, and longer than that."), params, cache=cache)
        again = generate(s, prompt, params, cache=cache)
        assert again.tokens == first == plain[:16]
        assert cache.stats.hits > 0


def test_a_restored_sliding_window_state_is_never_cut_back_past_its_window(families):
    """llama.cpp saves only the window's cells of a sliding-window cache: a snapshot longer
    than the window, restored and cut back, would attend over cells that are gone."""
    with _loaded(families["gemma4"]["target"], MtpSource.OFF) as lm:
        s, model = lm.session, lm.model
        assert model.n_swa > 0 and not model.restores_cut_back
        prompt = model.prompt_tokens(PROMPT)
        params = DecodeParams(max_tokens=24, ignore_eog=True)
        want = generate(s, prompt, params).tokens
        assert len(s.target_tokens) > model.n_swa + len(prompt) // 2
        snap = s.snapshot()
        generate(s, model.prompt_tokens("Something else entirely."), params)
        s.restore(snap)
        assert s.floor == snap.n - 1
        assert generate(s, prompt, params).tokens == want  # decoded again, not cut back


@pytest.mark.parametrize("fam", ("glm4moe", "step35"))
def test_the_prompt_window_on_contexts_that_cannot_skip_positions(families, fam):
    """Families without M-RoPE need an MTP context's positions consecutive: the head's
    prompt window starts such a context over, empty, at the window (chained heads too)."""
    with _loaded(families[fam]["target"], MtpSource.INTEGRATED) as lm:
        s = lm.session
        assert not s.holes_ok
        plain = _plain(lm)
        prompt = lm.model.prompt_tokens(PROMPT)
        s.prompt_window = 4
        params = DecodeParams(max_tokens=32, ignore_eog=True, depth=FixedDepth(2))
        s.reset()
        g = generate(s, prompt, params)
        assert g.tokens == plain and g.stats.drafted > 0
        assert s.draft_tokens[: len(prompt) - 4] == [HOLE] * (len(prompt) - 4)
        turn2 = prompt + g.tokens + lm.model.prompt_tokens(" And then? Go on, with a dog this time.")[1:]
        again = generate(s, turn2, params)
        assert again.stats.prompt_tokens_reused > len(prompt) and again.stats.drafted > 0
        s.reset()
        s.prompt_window = 1 << 20
        assert again.tokens == generate(s, turn2, DecodeParams(max_tokens=32, ignore_eog=True)).tokens


def test_refusals_are_typed_errors_in_words(families):
    glm5 = families["glm5-next"]["target"]
    with pytest.raises(MtpUnavailableError, match="without MTP"):
        _load(glm5, MtpSource.INTEGRATED)
    with _loaded(glm5, MtpSource.AUTO) as lm:  # auto never picks what cannot draft, and says why
        assert lm.source == MtpSource.OFF
        assert (
            "MTP is off for this model" in lm.info.mtp_off_reason and "GLM5-Next NextN graph" in lm.info.mtp_off_reason
        )
    # where this build cannot load such a file's NextN tensors, the refusal says so (not "damaged")
    why = nextn_load_failure(validate_path(glm5)[1])
    assert why is not None and "not damaged" in why and "NextN" in why

    two = families["refusals"]["two_nextn"]
    report, facts, _ = validate_path(two)
    assert report.valid and facts.nextn_layers == 2
    assert "bad_nextn" in {w.code for w in report.warnings}
    with pytest.raises(MtpUnavailableError, match="exactly one NextN layer"):
        _load(two, MtpSource.INTEGRATED)
    with _loaded(two, MtpSource.AUTO) as lm:
        assert lm.source == MtpSource.OFF
        assert "exactly one NextN layer" in lm.info.mtp_off_reason
    with _loaded(families["qwen35moe"]["target"], MtpSource.AUTO) as lm:
        assert lm.source == MtpSource.INTEGRATED and lm.info.mtp_off_reason is None

    flat = families["refusals"]["no_recurrent"]
    report, _, _ = validate_path(flat)
    assert "no_recurrent_blocks" in {e.code for e in report.errors}
    with pytest.raises(GGUFError, match="none is recurrent"):
        _load(flat, MtpSource.OFF)

    unfused = families["refusals"]["unfused_qkv"]  # mimo2's MTP graph asserts a fused attn_qkv
    report, facts, _ = validate_path(unfused)
    assert report.valid and "nextn_incomplete" in {w.code for w in report.warnings}
    assert facts.nextn_missing
    with pytest.raises(MtpUnavailableError, match="attn_qkv"):
        _load(unfused, MtpSource.INTEGRATED)
    with _loaded(unfused, MtpSource.AUTO) as lm:
        assert lm.source == MtpSource.OFF


def test_exact_mode_is_bit_exact_on_every_family(families, tmp_path):
    """Exact mode (a child process: it switches process-wide kernels) on each family
    quantized to Q8_0: every verify width gives the one-at-a-time logits bit for bit and
    MTP at depths 1-3 emits plain greedy decoding's tokens; a family whose heads exact
    mode's KV cache cannot hold is refused in words."""
    index = tmp_path / "index.json"
    index.write_text(json.dumps({k: v for k, v in families.items() if k not in ("refusals", "glm5-next")}))
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.engine.runtime.exact_families_child", str(index), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["family"]: r for r in map(json.loads, done.stdout.strip().splitlines())}
    assert set(results) == set(json.loads(index.read_text()))
    refused = {k: r["refused"] for k, r in results.items() if "refused" in r}
    assert all("multiple of 32" in why for why in refused.values()), refused
    measured = {k: r for k, r in results.items() if "refused" not in r}
    assert len(measured) >= 10, sorted(refused)
    for fam, r in measured.items():
        assert r["identity"].startswith("bit-exact"), (fam, r["identity"])
        assert r["noise"] == 0.0 and r["prefill_split_diff"] == 0.0, fam
        assert all(w["flips"] == 0 and w["max_abs_diff"] == 0.0 for w in r["widths"]), fam
        assert r["mtp"] != "off" and [m["identical"] for m in r["runs"]] == [True, True, True], fam


@pytest.mark.parametrize("fam", ("step35", "gemma4"))
def test_two_sequences_together_on_chained_heads_and_a_shared_memory_assistant(families, fam):
    """Slots (engine.runtime.slots) on the two drafting modes whose MTP decodes are
    special: chained heads (a decode per head) and an assistant reading the target's KV
    cache (its streams mirror the target's). Each sequence equals its output alone."""

    f = families[fam]
    head = f["head"] if fam == "gemma4" else None
    mtp = MtpSource.EXTERNAL if head else MtpSource.INTEGRATED
    prompts = [PROMPT, "Once upon a time in a land far away"]
    params = DecodeParams(max_tokens=24, ignore_eog=True, depth=FixedDepth(2))
    with _loaded(f["target"], mtp, head) as solo:
        want = []
        for p in prompts:
            solo.session.reset()
            want.append(generate(solo.session, solo.model.prompt_tokens(p), params).tokens)
    lm = load(
        LoadSpec(f["target"], head=head, mtp=mtp, n_ctx=256, probe=False, fit="off", max_draft_depth=3, parallel=2)
    )
    try:
        got: list = [None, None]
        slots = [lm.slots.acquire(i) for i in range(2)]

        def run(i: int) -> None:  # on this thread, one of the batcher's sequences
            try:
                got[i] = generate(slots[i].session, lm.model.prompt_tokens(prompts[i]), params)
            finally:
                lm.slots.release(slots[i])

        for i in range(2):
            lm.slots.batcher.start(lambda i=i: run(i))
        while lm.slots.batcher.active:  # this thread owns the model: it runs the steps and the sequences
            lm.slots.batcher.step_once(0.005)
        assert [g.tokens for g in got] == want
        assert all(g.stats.accepted > 0 for g in got)
    finally:
        lm.close()
