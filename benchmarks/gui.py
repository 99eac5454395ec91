"""GUI benchmarks (figures, not tests):

* time from launching ``mtp-studio`` to its window painted, on the demo model;
* the event loop's worst stall while the chat streams at full speed: a 1 ms timer
  runs during a long reply from a fast model and the largest gap between its ticks is
  reported (goal: under 50 ms).

    python -m benchmarks.gui [--tokens 20000]
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


def drop_page_cache() -> bool:
    """Evict cached file pages (Linux, root) so the next start reads from disk."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def startup_seconds(command: list[str] | None = None, runs: int = 3, cold: bool = False) -> list[float]:
    """Wall time from process launch to the window's first turn of the event loop after
    it is shown (``MTP_STUDIO_QUIT_AFTER_PAINT``), each run as a first-time user (empty
    settings). ``command`` defaults to this source install; pass a frozen binary to time
    the package. ``cold``: drop the page cache before each run."""
    command = command or [sys.executable, "-m", "app.launcher"]
    out = []
    for _ in range(runs):
        if cold and not drop_page_cache():
            raise SystemExit("cannot drop the page cache here (needs Linux and root); run without --cold")
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, MTP_STUDIO_HOME=home, MTP_STUDIO_QUIT_AFTER_PAINT="1", QT_QPA_PLATFORM="offscreen")
            t = time.perf_counter()
            p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            assert p.stdout is not None
            painted = None
            for line in p.stdout:
                if line.startswith("mtp-studio: window painted"):
                    painted = time.perf_counter() - t
                    break
            _, err = p.communicate()
            if p.returncode != 0 or painted is None:
                raise SystemExit(f"{' '.join(command)} exited {p.returncode} before painting its window:\n{err}")
            out.append(painted)
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
        chat.input.setPlainText("Go as fast as you can")
        clock.start()
        ticker.start()
        chat.send()
        chat.job.finished.connect(lambda res, _cancelled: (results.append(res), loop.quit()))
        loop.exec()  # a real event loop, as in the app: idle waits do not hold the GIL
        ticker.stop()
        ctx.bridge.engine.stop()
        res = results[-1]
        return max(gaps), statistics.median(gaps), len(res.tokens), res.stats.tokens_per_second


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gui")
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", help="time this executable's start instead (e.g. build/dist/mtp-studio/mtp-studio)")
    ap.add_argument("--cold", action="store_true", help="drop the page cache before each start (Linux, root)")
    ap.add_argument("--startup-only", action="store_true")
    a = ap.parse_args()
    what = a.binary or "source install"
    for cold in ([True] if a.cold else []) + [False]:
        starts = startup_seconds([a.binary] if a.binary else None, a.runs, cold=cold)
        label = "cold page cache" if cold else "warm page cache"
        print(
            f"launch to painted window ({what}, {label}, demo model): median {statistics.median(starts):.2f} s  "
            f"({', '.join(f'{s:.2f}' for s in starts)})"
        )
    if a.startup_only:
        return 0
    worst, median, n, tps = worst_stall(a.tokens)
    print(
        f"event loop while streaming {n} tokens at {tps:.0f} tok/s: worst stall {worst:.0f} ms, median tick gap "
        f"{median:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
