"""``mtp-studio --self-test``: prove this installation works, in a few seconds.

Loads the bundled demo model the way the app does (validation, the probe in a child
process, llama.cpp), runs a short greedy generation without MTP and one with it, and
checks what docs/mtp.md's "Speculation and identity" promises: the MTP tokens are the
plain tokens, or, where llama.cpp's kernels are not batch-invariant, every MTP token is
the one-token-at-a-time argmax up to the measured logit noise. Prints one line, ending
with the identity this installation guarantees. Works the same in a source install and
in the frozen app; exit status 0 when everything held.
"""

from __future__ import annotations

import sys
import time

PROMPT = 'def read_lines(path):\n    """Return the lines of the file at path."""\n'
TOKENS = 48


def _noise_check(plain: list[int], spec: list[int]):
    """A Call body: the positions where ``spec`` is not the argmax up to twice the noise
    measured by replaying ``plain`` in a 4-wide batch."""
    from engine.runtime.measure.batchnoise import check_within_noise, reference, replay

    def fn(state, _cancel, _emit):
        lm = state.get(None)
        prompt = lm.model.prompt_tokens(PROMPT)
        noise = replay(lm, prompt, *reference(lm, prompt, 16), width=4).max_abs_diff
        return check_within_noise(lm, prompt, spec, 2 * noise)

    return fn


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    try:
        from engine.runtime import jobs as J
        from engine.runtime.decode.depth import Mtp
        from engine.runtime.llama.devices import list_devices
        from engine.runtime.engine import Engine
        from engine.runtime.load.loader import LoadSpec, MtpSource
        from engine.synth.demo import demo_model_path

        with Engine() as engine:
            info = engine.submit(J.LoadModel(LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED))).result(120)
            prompt = engine.submit(
                J.Call(lambda st, *_: st.get(None).model.prompt_tokens(PROMPT), access="read")
            ).result(60)
            plain = engine.submit(J.Generate(prompt=prompt, max_tokens=TOKENS, mtp=Mtp.OFF, ignore_eog=True)).result(
                120
            )
            spec = engine.submit(J.Generate(prompt=prompt, max_tokens=TOKENS, draft_depth=3, ignore_eog=True)).result(
                120
            )
            off_noise = []
            if plain.tokens != spec.tokens:
                off_noise = engine.submit(J.Call(_noise_check(plain.tokens, spec.tokens))).result(120)
        devices = ",".join(f"{d.name}({d.type})" for d in list_devices())
    except Exception as e:  # the one line must always come
        print(f"mtp-studio self-test: FAILED: {type(e).__name__}: {e}")
        return 1
    same = plain.tokens == spec.tokens
    ok = len(plain.tokens) == TOKENS and spec.stats.drafted > 0 and not off_noise
    verdict = "yes" if same else ("no, near-ties within batch noise" if not off_noise else f"NO: {off_noise[:3]}")
    print(
        f"mtp-studio self-test: {'ok' if ok else 'FAILED'}: demo model ({info.mtp} MTP) "
        f"{len(plain.tokens)} tokens, greedy == MTP: {verdict}, "
        f"acceptance {spec.stats.acceptance:.2f}, {spec.stats.tokens_per_second:.0f} tok/s, "
        f"devices {devices}, CPU weight repacking {'on' if info.extra_bufts else 'off'}, frozen "
        f"{bool(getattr(sys, 'frozen', False))}, {time.perf_counter() - t0:.1f} s; "
        f"identity here: {info.identity}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
