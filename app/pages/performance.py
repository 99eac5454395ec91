"""Performance: live graphs of what speculation is buying, and the A/B benchmark.

While replies generate (from the Chat page or the endpoint, several at once), round
statistics stream in from the bridge; the graphs redraw at most 5 times a second: tokens/s
over time, acceptance over time, acceptance per draft position, the accepted-length
distribution, and MTP on vs off speed once a plain baseline exists (a reply with MTP off, or
a benchmark run). They show every request together (tokens/s of all streams on one clock),
or the one chosen in the list: a new request adds to them, it does not restart them
(app.pages.perftracks).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.bridge import JobSignals
from app.context import AppContext
from app.pages.perftracks import Tracks, View
from app.widgets.charts import GREEN, ORANGE, BarChart, LineChart
from app.widgets.page import page_layout
from engine.facade import J
from engine.facade import DEFAULT_PROMPTS, BenchResult, bench_job, parse_depths
from engine.facade import GenerationStats
from engine.facade import SlotInfo


class PerformancePage(QWidget):
    def __init__(self, ctx: AppContext, models=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        #: the window's model controller: the bench runs on the window's model
        self.models = models
        #: every generation followed (any source), each and together
        self.tracks = Tracks()
        self._epoch = time.monotonic()  # the page's clock: the aggregate's time axis
        self._dirty = False
        self.speeds: dict[str, float] = {}  # "MTP off" / "MTP on" -> tok/s of the last reply each way
        self.bench_job: JobSignals | None = None
        self._build()
        ctx.bridge.started.connect(self._on_started)
        self._timer = QTimer(self)
        self._timer.setInterval(200)
        self._timer.timeout.connect(self._redraw)
        self._timer.start()

    def _build(self) -> None:
        self.summary = QLabel("Generate a reply to see live figures.")
        self.summary.setObjectName("Figures")
        lay = page_layout(self, "Performance", aside=self.summary)
        row = QHBoxLayout()
        row.addWidget(QLabel("Showing"))
        self.showing = QComboBox()  # every request together, or one of them
        self.showing.addItem("All requests", None)
        self.showing.currentIndexChanged.connect(lambda _i: self._mark_dirty())
        row.addWidget(self.showing)
        row.addStretch(1)
        lay.addLayout(row)
        grid = QGridLayout()
        self.tps_chart = LineChart("Tokens per second", "tok/s")
        self.acc_chart = LineChart("Acceptance over time", "accepted / drafted", y_max=1.0, color=GREEN)
        self.pos_chart = BarChart("Acceptance by draft position", "acceptance", y_max=1.0, color=GREEN)
        self.len_chart = BarChart("Accepted drafts per round", "rounds", integer=True)
        self.onoff_chart = BarChart("MTP on vs off", "tok/s", color=ORANGE)
        grid.addWidget(self.tps_chart, 0, 0)
        grid.addWidget(self.acc_chart, 0, 1)
        grid.addWidget(self.pos_chart, 1, 0)
        grid.addWidget(self.len_chart, 1, 1)
        grid.addWidget(self.onoff_chart, 2, 0)
        bench = QWidget()
        bl = QVBoxLayout(bench)
        row = QHBoxLayout()
        row.addWidget(QLabel("Benchmark: tokens per prompt"))
        self.bench_tokens = QSpinBox()
        self.bench_tokens.setRange(16, 2048)
        self.bench_tokens.setValue(96)
        row.addWidget(self.bench_tokens)
        row.addWidget(QLabel("runs"))
        self.bench_runs = QSpinBox()
        self.bench_runs.setRange(1, 20)
        self.bench_runs.setValue(2)
        row.addWidget(self.bench_runs)
        bl.addLayout(row)
        row = QHBoxLayout()
        self.bench_btn = QPushButton("Run A/B benchmark")
        self.bench_btn.setObjectName("Primary")
        self.bench_cancel = QPushButton("Cancel")
        self.bench_cancel.setEnabled(False)
        row.addWidget(self.bench_btn)
        row.addWidget(self.bench_cancel)
        bl.addLayout(row)
        self.bench_bar = QProgressBar()
        self.bench_bar.setVisible(False)
        bl.addWidget(self.bench_bar)
        self.bench_result = QLabel(
            "Runs plain greedy against depths 1, 2, 3 and auto on the loaded model, "
            "interleaved, and checks every output is identical."
        )
        self.bench_result.setObjectName("Hint")
        self.bench_result.setWordWrap(True)
        bl.addWidget(self.bench_result, 1)
        self.bench_verdict = QLabel("")  # says so when MTP cannot pay on this model here
        self.bench_verdict.setWordWrap(True)
        self.bench_verdict.setVisible(False)
        bl.addWidget(self.bench_verdict)
        grid.addWidget(bench, 2, 1)
        lay.addLayout(grid, 1)
        self.bench_btn.clicked.connect(self.run_bench)
        self.bench_cancel.clicked.connect(lambda: self.bench_job.cancel() if self.bench_job else None)

    # ------------------------------------------------------------- live data
    def _on_started(self, jid: int, job: object) -> None:
        if not isinstance(job, J.Generate):
            return
        followed = self.ctx.bridge.follow(jid)
        assert followed is not None  # a started job has signals until it ends
        label = f"request {jid}" + (f" · {job.model}" if job.model else "")
        self.tracks.start(jid, label, time.monotonic() - self._epoch, mtp_on=job.mtp != "off" and job.temperature == 0)
        followed.rounds.connect(lambda rounds: self._on_rounds(jid, rounds))
        followed.finished.connect(lambda result, _cancelled: self._on_finished(jid, result))
        self._list_tracks()

    def _on_rounds(self, jid: int, rounds: list) -> None:
        self.tracks.add(jid, rounds)
        self._dirty = True

    def _on_finished(self, jid: int, result: object) -> None:
        final = result.stats if isinstance(result, J.GenerateResult) else None
        self.tracks.finish(jid, final)
        if final is not None and final.generated > 8 and not final.sampled:
            self.speeds["MTP on" if final.mtp == "on" else "MTP off"] = final.tokens_per_second
        self._list_tracks()

    def _list_tracks(self) -> None:
        """The list of requests to choose from (newest first), keeping the choice."""
        chosen = self.showing.currentData()
        self.showing.blockSignals(True)
        self.showing.clear()
        self.showing.addItem("All requests", None)
        for t in reversed(list(self.tracks.tracks.values())):
            self.showing.addItem(t.label + ("" if t.done else " (running)"), t.jid)
        at = self.showing.findData(chosen)
        self.showing.setCurrentIndex(at if at >= 0 else 0)
        self.showing.blockSignals(False)
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        self._dirty = True

    def view(self) -> View:
        """What the charts show: the chosen request's figures, or every request's."""
        return self.tracks.view(self.showing.currentData())

    @property
    def stats(self) -> GenerationStats:
        """The speculation figures shown now."""
        return self.view().stats

    # ------------------------------------------------------------------ draw
    def _redraw(self) -> None:
        if not self.isVisible():
            return
        streams = self.streams()
        if not self._dirty and len(streams) < 2:
            return
        self._dirty = False
        v = self.view()
        self.tps_chart.set_points(v.tps)
        self.acc_chart.set_points(v.acc)
        pos = v.stats.acceptance_by_position
        self.pos_chart.set_bars([str(i + 1) for i in range(len(pos))], pos)
        hist = v.stats.accept_len_hist
        self.len_chart.set_bars([str(i) for i in range(len(hist))], [float(x) for x in hist])
        labels = sorted(self.speeds, key=lambda k: k != "MTP off")  # the baseline first
        self.onoff_chart.set_bars(labels, [self.speeds[k] for k in labels])
        s = v.stats
        text = f"{v.emitted} tokens" + (f" · {v.rate:.1f} tok/s" if v.running else "")
        if s.drafted:
            text += f" · acceptance {s.acceptance:.2f} · mean accepted {s.mean_accept_len:.2f}"
        if s.suffix_drafted:  # drafts from the conversation itself (engine.runtime.decode.drafting.suffix)
            text += f" · from the conversation {s.suffix_accepted}/{s.suffix_drafted} accepted"
        on = [v for k, v in self.speeds.items() if k.startswith("MTP on")]
        if "MTP off" in self.speeds and on and self.speeds["MTP off"] > 0:
            ratio = on[0] / self.speeds["MTP off"]
            text += f" · MTP speedup {ratio:.2f}x"
            if ratio < 1.0:
                text += " — drafting costs more than it saves on this model here (Benchmark tells why)"
        if len(streams) >= 2:  # several requests decoding together (engine.runtime.slots)
            text += f" · {len(streams)} streams: {sum(x.tokens_per_second for x in streams):.1f} tok/s together"
        self.summary.setText(text)

    def streams(self) -> list[SlotInfo]:
        """The slots decoding a request now, over every loaded model."""
        return [x for per in self.ctx.bridge.slots().values() for x in per if x.busy]

    def showEvent(self, event) -> None:
        self._dirty = True
        super().showEvent(event)

    # ------------------------------------------------------------------ bench
    def run_bench(self) -> None:
        if self.bench_job is not None:
            return
        # the window's model: the bench has it to itself once its own streams end, and the
        # endpoint's other models go on meanwhile
        current = self.models.current if self.models is not None else None
        model = current.name if current else next(iter(self.ctx.bridge.models()), None)
        fn = bench_job(
            parse_depths("0,1,2,3,auto"),
            list(DEFAULT_PROMPTS),
            self.bench_tokens.value(),
            self.bench_runs.value(),
            model=model,
        )
        job = self.bench_job = self.ctx.bridge.run(J.Call(fn, "bench", model=model))
        job.progress.connect(self._on_progress)
        job.failed.connect(self._on_failed)
        job.finished.connect(self._bench_done)
        self.bench_btn.setEnabled(False)
        self.bench_cancel.setEnabled(True)
        self.bench_bar.setVisible(True)
        self.bench_bar.setValue(0)
        self.bench_result.setText("Benchmarking… (this model's requests wait until it is done; other models' go on)")

    def _on_progress(self, fraction: float, message: str) -> None:
        self.bench_bar.setValue(int(fraction * 100))
        self.bench_bar.setFormat(message)

    def _on_failed(self, error: object) -> None:
        self._bench_done(None, False)
        if self.ctx.messages is not None:
            self.ctx.messages.error("Benchmark failed", error)  # type: ignore[arg-type]

    def _bench_done(self, result: object, cancelled: bool) -> None:
        self.bench_job = None
        self.bench_btn.setEnabled(True)
        self.bench_cancel.setEnabled(False)
        self.bench_bar.setVisible(False)
        if cancelled or result is None:
            self.bench_result.setText("Benchmark cancelled." if cancelled else "Benchmark failed.")
            return
        r: BenchResult = result  # type: ignore[assignment]
        rows = [
            f"{a.depth:>5}: {a.median:7.1f} tok/s  {r.speedup(a):.2f}x  acceptance {a.totals.acceptance:.2f}"
            + ("  OUTPUT DIFFERS" if a.mismatches else "")
            for a in r.arms
        ]
        verdict = (
            "identical outputs in every arm"
            if r.identical
            else (
                "outputs differ at near-ties: llama.cpp's kernels are not batch-invariant in this configuration "
                "(Backend page: exact arithmetic)"
            )
        )
        auto = next((a for a in r.arms if a.depth == "auto" and a.depth_choices), None)
        if auto is not None:
            rows.append("auto chose depths: " + ", ".join(f"{k}: {v}" for k, v in sorted(auto.depth_choices.items())))
        self.bench_result.setText("<pre>" + "\n".join(rows) + f"\n{verdict}</pre>")
        said = r.verdict()
        self.bench_verdict.setText(said or "")
        self.bench_verdict.setVisible(bool(said))
        self.last_bench = r
        best = max(r.arms, key=lambda a: a.median)
        self.speeds = {"MTP off": r.arm("0").median, f"MTP on ({best.depth})": best.median}
        self._dirty = True
