"""The A/B benchmark: JSON shape, identity checks (and their failure), plot, the
benchmark-model generator."""

from __future__ import annotations

import struct

import pytest

from engine.errors import InvalidRequestError
from engine.runtime.measure.bench import parse_depths, run_bench
from engine.runtime.decode.loop import generate
from engine.synth.benchmodel import bench_spec
from tests.engine.cli_helpers import mtp_json, mtp_studio
from tests.engine.runtime.helpers import load_fixture, run


@pytest.fixture(scope="module")
def partial(fixtures):
    lm = load_fixture(fixtures["partial"], "integrated", max_depth=8)
    yield lm
    lm.close()


def test_run_bench_result(partial):
    res = run_bench(partial, arms=parse_depths("1,3,auto"), prompts=["Hello there", "One two"], max_tokens=24, runs=2)
    body = res.to_json()
    assert [a["depth"] for a in body["arms"]] == ["0", "1", "3", "auto"]
    assert body["identical"] and all(a["identical"] for a in body["arms"])
    for a in body["arms"]:
        assert len(a["tokens_per_second_runs"]) == 2 and a["tokens_per_second_median"] > 0
        assert {"depth", "tokens_per_second_median", "speedup", "acceptance", "identical"} <= set(a)
    base = body["arms"][0]
    assert base["speedup"] == 1.0 and base["acceptance"] == 0.0
    assert 0 < body["arms"][2]["acceptance"] < 1 and len(body["arms"][2]["acceptance_by_position"]) == 3
    assert sum(body["arms"][3]["depth_choices"].values()) > 0


def test_profile_splits_each_arms_time_and_leaves_nothing_attached(partial):
    from engine.runtime.decode.grammar import Constraint
    from engine.runtime.decode.sampling import Sampler
    from engine.runtime.measure.profile import PARTS

    methods = {name: Sampler.__dict__[name] for name in ("sample", "dense", "sample_dense")}
    res = run_bench(partial, arms=["0", "2"], prompts=["Hello there"], max_tokens=32, runs=2, profile=True)
    plain, spec = (a["profile"] for a in res.to_json()["arms"])
    for prof, arm in ((plain, res.arm("0")), (spec, res.arm("2"))):
        assert set(prof["ms_per_token"]) == set(PARTS) and prof["tokens"] == arm.totals.generated
        # the parts add up to the arm's own generation time per token
        measured = arm.totals.generation_ms / arm.totals.generated
        assert sum(prof["ms_per_token"].values()) == pytest.approx(measured, rel=0.02)
        assert prof["ms_per_token"]["target decode"] > 0 and prof["ms_per_token"]["python between calls"] > 0
    assert plain["ms_per_token"]["mtp decode"] == 0 and spec["ms_per_token"]["mtp decode"] > 0
    assert spec["tokens_per_round"] > plain["tokens_per_round"]
    # the timers are gone: the contexts use their class's methods and the classes are as they were
    assert "decode" not in vars(partial.session.target) and "decode" not in vars(partial.session.draft)
    assert all(Sampler.__dict__[n] is m for n, m in methods.items()) and partial.session.phase_hook is None
    assert Constraint.__dict__["allowed"].__qualname__ == "Constraint.allowed"


def test_a_mismatching_arm_fails_the_benchmark(partial):
    def corrupt(lm, prompt, params, arm):
        g = generate(lm.session, prompt, params)
        if arm == "2":
            g.tokens[5] = (g.tokens[5] + 1) % lm.model.n_vocab
        return g

    res = run_bench(partial, arms=["0", "2"], prompts=["Hello"], max_tokens=16, runs=1, generate_fn=corrupt)
    assert not res.identical
    arm = res.arm("2")
    assert arm.mismatches and "at token 5" in arm.mismatches[0]
    assert res.to_json()["arms"][1]["identical"] is False


def test_depth_parsing():
    assert parse_depths("3,auto,1") == ["0", "3", "auto", "1"]
    with pytest.raises(InvalidRequestError):
        parse_depths("1,x")


def test_bench_cli_json_and_plot(fixtures, tmp_path):
    png = tmp_path / "bench.png"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello there\nThe quick brown fox\n")
    body = mtp_json(
        "bench",
        "--model",
        str(fixtures["full"].path),
        "--depths",
        "0,2,auto",
        "--runs",
        "1",
        "--max-tokens",
        "16",
        "--prompts",
        str(prompts),
        "--plot",
        str(png),
    )
    assert [a["depth"] for a in body["arms"]] == ["0", "2", "auto"] and body["identical"]
    assert body["arms"][1]["acceptance"] == 1.0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24])[0] > 600  # a real image
    assert mtp_studio("bench", "--model", str(fixtures["full"].path), "--depths", "1,z").returncode == 2


@pytest.mark.parametrize("acceptance", [0.0, 0.5, 1.0])
def test_make_model_gives_the_chosen_acceptance(tmp_path, acceptance):
    out = tmp_path / "bench.gguf"
    p = mtp_studio("bench", "make-model", "--size-mb", "64", "--acceptance", str(acceptance), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert 54e6 < out.stat().st_size < 74e6  # the smallest the 4-block minimum allows
    from engine.runtime.load.loader import LoadSpec, MtpSource, load

    lm = load(LoadSpec(out, mtp=MtpSource.INTEGRATED))
    try:
        g = run(lm, "Hello world, this is a benchmark.", 1, max_tokens=250, ignore_eog=True)
        assert g.stats.acceptance == pytest.approx(acceptance, abs=0.1)
    finally:
        lm.close()


def test_bench_spec_sizes():
    small, big = bench_spec(100, 0.5), bench_spec(400, 0.5)
    assert big.n_trunk > small.n_trunk >= 4 and small.draft_pattern == "exact"


def test_bench_at_a_temperature_checks_seeded_identity_and_prints_one_json(fixtures):
    """Argmax drafts while sampling: every arm must emit depth 0's tokens (same seed per
    prompt and run); sampled drafts are equal in distribution only, and say so."""
    from tests.engine.cli_helpers import mtp_json

    common = [
        "bench",
        "--model",
        str(fixtures["partial"].path),
        "--depths",
        "0,2",
        "--runs",
        "1",
        "--max-tokens",
        "24",
        "--temperature",
        "0.8",
    ]
    body = mtp_json(*common)
    assert body["temperature"] == 0.8 and body["sampled_draft"] is False and body["identical"] is True
    assert {a["depth"]: a["identical"] for a in body["arms"]} == {"0": True, "2": True}
    assert next(a for a in body["arms"] if a["depth"] == "2")["acceptance_by_position"]
    sd = mtp_json(*common, "--sampled-draft")
    assert sd["sampled_draft"] is True and sd["identical"] is None


def test_a_model_where_mtp_cannot_pay_is_told_in_words(fixtures):
    lm = load_fixture(fixtures["random"], "integrated", max_depth=4)  # a head whose drafts are never right
    try:
        res = run_bench(lm, arms=["0", "1", "3"], prompts=["Hello there"], max_tokens=32, runs=2)
    finally:
        lm.close()
    body = res.to_json()
    assert all(a["speedup"] < 1.0 for a in body["arms"][1:])
    v = body["verdict"]
    assert v.startswith("MTP does not pay on this model here") and "ms per token against" in v and "acceptance 0.0" in v
    r = mtp_studio(
        "bench", "--model", str(fixtures["random"].path), "--depths", "1", "--runs", "3", "--max-tokens", "32"
    )
    assert r.returncode == 0 and "MTP does not pay" in r.stdout


def test_no_verdict_where_mtp_pays():
    from engine.runtime.decode.stats import GenerationStats
    from engine.runtime.measure.bench import ArmResult, BenchResult

    def arm(depth, tps):
        return ArmResult(
            depth, [tps, tps], GenerationStats(generated=100, generation_ms=10.0, draft_settle_ms=3.0, verify_ms=6.0)
        )

    assert BenchResult("m", [arm("0", 100.0), arm("1", 104.0)], 2, 32, 1).verdict() is None
    told = BenchResult("m", [arm("0", 100.0), arm("1", 102.0)], 2, 32, 1).verdict()  # within the noise: no gain
    assert told and "depth 1" in told and "1.02x" in told
