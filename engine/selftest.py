"""``mtp-studio --self-test``: prove this installation works, in a few seconds.

Loads the bundled demo model the way the app does (validation, the probe in a child
process, llama.cpp), runs a short greedy generation and an MTP one, checks they are
identical (the demo's logit margins are far wider than llama.cpp's batch noise, so this
holds in every configuration), and prints one line, ending with what identity this
installation guarantees on other models (README: "Speculation and identity"). Works the same in a source install and in the frozen
app; exit status 0 when everything held.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    try:
        from engine.backends.devices import list_devices
        from engine.runtime import jobs as J
        from engine.runtime.engine import Engine
        from engine.runtime.loader import LoadSpec, MtpSource
        from engine.synth.demo import demo_model_path

        messages = [{"role": "user", "content": "self-test"}]
        with Engine() as engine:
            info = engine.submit(J.LoadModel(LoadSpec(demo_model_path(), mtp=MtpSource.INTEGRATED))).result(120)
            plain = engine.submit(J.Generate(messages=messages, max_tokens=48, mtp="off")).result(120)
            spec = engine.submit(J.Generate(messages=messages, max_tokens=48, draft_depth=3)).result(120)
        devices = ",".join(f"{d['name']}({d['type']})" for d in list_devices())
    except Exception as e:  # the one line must always come
        print(f"mtp-studio self-test: FAILED: {type(e).__name__}: {e}")
        return 1
    ok = plain.tokens == spec.tokens and len(plain.tokens) > 0 and spec.stats.drafted > 0
    print(
        f"mtp-studio self-test: {'ok' if ok else 'FAILED'}: demo model ({info['mtp']} MTP) "
        f"{len(plain.tokens)} tokens, greedy == MTP: {plain.tokens == spec.tokens}, "
        f"acceptance {spec.stats.acceptance:.2f}, {spec.stats.tokens_per_second:.0f} tok/s, "
        f"devices {devices}, frozen {bool(getattr(sys, 'frozen', False))}, {time.perf_counter() - t0:.1f} s; "
        f"identity here: {info.get('identity')}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
