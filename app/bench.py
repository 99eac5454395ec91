"""GUI benchmarks (figures, not tests):

* time from launching ``mtp-studio`` to its window painted, on the demo model;
* the event loop's worst stall while the chat streams at full speed: a 1 ms timer
  runs during a long reply from a fast model and the largest gap between its ticks is
  reported (goal: under 50 ms).

    python -m app.bench [--tokens 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def startup_seconds(runs: int = 3) -> list[float]:
    """Wall time from process launch to the first paint of the window."""
    code = (
        "import os; os.environ.setdefault('QT_QPA_PLATFORM', 'offscreen')\n"
        "from app.main import build_app\n"
        "from PySide6.QtCore import QTimer\n"
        "app, w, ctx = build_app(); w.show(); w.models.load_startup()\n"
        "QTimer.singleShot(0, lambda: (print('painted', flush=True), app.quit()))\n"
        "app.exec(); ctx.bridge.engine.stop()\n"
    )
    out = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, MTP_STUDIO_HOME=home)
            t = time.perf_counter()
            p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
            assert p.stdout is not None
            for line in p.stdout:
                if line.startswith("painted"):
                    out.append(time.perf_counter() - t)
                    break
            p.wait()
    return out


def worst_stall(tokens: int) -> tuple[float, float, int, float]:
    """(worst gap ms, median gap ms, tokens, tok/s) while the chat streams."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

    from app.main import build_app
    from engine.synth.qwen35 import Qwen35Spec, build_model

    with tempfile.TemporaryDirectory() as home:
        os.environ["MTP_STUDIO_HOME"] = home
        model = Path(home) / "fast.gguf"
        build_model(Qwen35Spec(name="stall benchmark", weights="constructed", seed=5), model)
        app, w, ctx = build_app()
        w.show()
        loop = QEventLoop()
        w.models.loaded.connect(lambda info: loop.quit())
        w.models.load(model, source="integrated")
        loop.exec()
        ctx.settings.chat.max_tokens = tokens
        chat = w.pages["chat"]
        chat.depth.setCurrentText("auto")
        gaps: list[float] = []
        clock = QElapsedTimer()
        ticker = QTimer()
        ticker.setInterval(1)
        last = [0]

        def tick() -> None:
            now = clock.elapsed()
            gaps.append(now - last[0])
            last[0] = now

        ticker.timeout.connect(tick)
        results = []
        ctx.bridge.finished.connect(lambda jid, res, c: results.append(res))
        chat.input.setPlainText("Go as fast as you can")
        clock.start()
        ticker.start()
        ctx.bridge.finished.connect(lambda jid, res, c: loop.quit())
        chat.send()
        loop.exec()  # a real event loop, as in the app: idle waits do not hold the GIL
        ticker.stop()
        ctx.bridge.engine.stop()
        res = results[-1]
        return max(gaps), statistics.median(gaps), len(res.tokens), res.stats.tokens_per_second


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m app.bench")
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    starts = startup_seconds(a.runs)
    print(f"launch to painted window (demo model): median {statistics.median(starts):.2f} s  ({', '.join(f'{s:.2f}' for s in starts)})")
    worst, median, n, tps = worst_stall(a.tokens)
    print(f"event loop while streaming {n} tokens at {tps:.0f} tok/s: worst stall {worst:.0f} ms, median tick gap {median:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
