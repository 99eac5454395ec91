"""What "speculation never changes the output" means on real arithmetic, tested.

* Default configuration: llama.cpp's kernels are not batch-invariant, so a verify batch's
  argmax may differ from one-token-at-a-time decoding — but only at near-ties: every
  emitted token is within the measured logit noise of the one-at-a-time row maximum.
  The check would catch a token speculation got wrong.
* Exact mode: bit-identical, on the real Gemma file (also past 512 positions, where
  one-token decodes take another attention path) and with MTP on quantized fixtures.
  Exact mode switches process-wide kernels, so it runs in a child process.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.runtime.measure.batchnoise import check_within_noise, reference, replay
from engine.runtime.load.loader import LoadSpec, MtpSource, load
from tests.engine.cli_helpers import mtp_json
from tests.engine.runtime.helpers import PROMPTS, load_fixture, run

STORY = "Once upon a time, in a small village by the sea, there lived"


def test_verify_batch_tokens_are_one_at_a_time_argmaxes_up_to_the_noise(gemma_lm):
    prompt = gemma_lm.model.prompt_tokens(STORY)
    tokens, ref = reference(gemma_lm, prompt, 48)
    for width in (2, 4, 8):
        w = replay(gemma_lm, prompt, tokens, ref, width)
        noise = w.max_abs_diff
        # a flip needs the two top logits closer than the two rows' combined noise
        assert all(m <= 2 * noise for m in w.flip_margins), (width, noise, w.flip_margins)
        shortfall = [float(ref[i].max() - ref[i][t]) for i, t in enumerate(w.batch_tokens)]
        assert max(shortfall) <= 2 * noise
        # the same check catches a token that is not a near-tie
        wrong = list(w.batch_tokens)
        i = int(np.argmax([_margin(r) for r in ref]))  # the most confident position
        wrong[i] = int(np.argsort(ref[i])[-10])  # its 10th choice
        assert float(ref[i].max() - ref[i][wrong[i]]) > 2 * noise + 1.0


def _margin(row):
    a, b = np.partition(row, -2)[-2:]
    return abs(float(a - b))


@pytest.mark.parametrize("quant", ["Q4_0", "Q4_K_M"])
def test_mtp_output_on_quantized_models_passes_the_noise_check_and_a_wrong_token_fails(quantized, quant):
    fx = quantized("partial", quant)
    lm = load_fixture(fx, "integrated", max_depth=3)
    try:
        prompt = lm.model.prompt_tokens(PROMPTS[1])
        g = run(lm, prompt, 3, max_tokens=64)
        _, ref = reference(lm, prompt, 8)
        noise = max(replay(lm, prompt, *reference(lm, prompt, 16), width=4).max_abs_diff, 0.0)
        assert check_within_noise(lm, prompt, g.tokens, 2 * noise) == []
        bad = list(g.tokens)
        bad[5] = (bad[5] + 7) % lm.model.n_vocab
        found = check_within_noise(lm, prompt, bad, 2 * noise)
        assert found and found[0][0] == 5
    finally:
        lm.close()


# ---------------------------------------------------------------- exact mode (child)
def test_exact_mode_makes_gemma_bit_exact_at_every_verify_width(gemma):
    out = mtp_json("bench", "identity", "--model", str(gemma), "--tokens", "40", "--max-width", "9", "--exact")
    assert out["exact_mode"] is True and out["noise"] == 0.0 and out["prefill_split_diff"] == 0.0
    assert [w["width"] for w in out["widths"]] == list(range(2, 10))
    assert all(w["flips"] == 0 and w["max_abs_diff"] == 0.0 for w in out["widths"])


def test_exact_mode_holds_past_512_positions(gemma):
    """One-token decodes over 512+ cached positions take llama.cpp's split-KV attention
    path; exact mode's Q8_0 KV cache keeps them on the batch path."""
    out = mtp_json(
        "bench",
        "identity",
        "--model",
        str(gemma),
        "--tokens",
        "12",
        "--max-width",
        "4",
        "--exact",
        "--prompt",
        "Item one is on the shelf and item two is on the floor.",
        "--prompt-repeat",
        "40",
    )
    assert out["prompt_tokens"] > 512 and out["noise"] == 0.0
    # a prompt decoded whole or as a reused prefix plus the rest: the same last row
    assert out["prefill_split_diff"] == 0.0


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_K_M"])
def test_exact_mode_mtp_is_bit_identical_on_quantized_models(quantized, quant):
    fx = quantized("partial", quant)
    out = mtp_json(
        "bench",
        "identity",
        "--model",
        str(fx.path),
        "--tokens",
        "48",
        "--max-width",
        "5",
        "--depths",
        "1,2,4",
        "--exact",
    )
    assert out["noise"] == 0.0 and [m["identical"] for m in out["mtp"]] == [True, True, True]
    assert out["identity"] == "bit-exact: identical to one-token-at-a-time greedy decoding"


def test_exact_mode_says_when_the_build_cannot_make_float_weights_exact(fixtures):
    """The F32 fixtures' batched matmuls go through llamafile's sgemm in the default
    build; the load says exactly what holds instead of claiming bit-exactness."""
    from engine.runtime.llama.exact import build_uses_llamafile
    from engine.runtime.llama.lib import system_info

    out = mtp_json(
        "generate", "--model", str(fixtures["partial"].path), "--prompt", "hi", "--max-tokens", "4", "--exact"
    )
    claim = out["model"]["identity"]
    if build_uses_llamafile(system_info()):
        assert "llamafile" in claim and "backend build --exact" in claim
    else:
        assert claim.startswith("bit-exact")
    assert out["model"]["exact"] is True


def test_exact_mode_needs_to_be_chosen_before_llama_cpp_starts(fixtures):
    from engine.errors import InvalidSettingError

    with pytest.raises(InvalidSettingError, match="before llama.cpp starts"):
        load(LoadSpec(fixtures["partial"].path, mtp=MtpSource.INTEGRATED, exact=True))
