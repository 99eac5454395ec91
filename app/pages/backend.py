"""Backend: the hardware detected, the llama.cpp build in use and why, and building or
switching builds with a live log. A new build takes effect at the next start (the
library is bound when llama.cpp is first loaded)."""

from __future__ import annotations

import html

from PySide6.QtWidgets import (
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.pages.rpcpanel import RpcPanel
from app.tasks import Task
from app.widgets.page import page_layout


def _detect_and_plan(report, cancel):
    from engine.facade.machine import load_manifest
    from engine.facade.machine import detect
    from engine.facade.machine import list_devices, loaded_lib_dir
    from engine.facade.machine import make_plan

    d = detect()
    plan = make_plan(d, rpc=True)  # builds made here can lend this machine and use others
    from engine.facade.machine import rpc_available

    try:
        devices, lib = list_devices(), str(loaded_lib_dir())
        rpc = rpc_available()
    except Exception as e:  # a broken build must not break the page
        devices, lib, rpc = [], f"cannot load: {e}", False
    from engine.facade.machine import verdict

    # the repacked kernels' verdict: remembered, or probed once per CPU and build (seconds)
    return d, plan, devices, lib, load_manifest(), rpc, verdict()


def _repack_line(v) -> str:
    """The Backend page's word on llama.cpp's CPU weight repacking (engine.runtime.llama.repack)."""
    if not v.allowed:
        return f"<b style='color:#b3261e'>CPU weight repacking: off on this CPU.</b> {html.escape(v.reason)}"
    why = {"ran": "its kernels ran on this CPU with this build", "override": v.reason}.get(v.status, v.reason)
    return f"<b>CPU weight repacking:</b> on — {html.escape(why)}."


class BackendPage(QWidget):
    def __init__(self, ctx: AppContext, models=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.task: Task | None = None
        self.plan = None
        self.detection = None
        lay = page_layout(self, "Backend")
        top = QHBoxLayout()
        hw = QGroupBox("This machine")
        hl = QVBoxLayout(hw)
        self.hardware = QTextBrowser()
        hl.addWidget(self.hardware)
        top.addWidget(hw, 1)
        pl = QGroupBox("Plan and build in use")
        pll = QVBoxLayout(pl)
        self.plan_view = QTextBrowser()
        pll.addWidget(self.plan_view)
        top.addWidget(pl, 1)
        lay.addLayout(top, 1)
        self.exact = QCheckBox("Exact arithmetic: speculation bit-identical to one-token-at-a-time decoding (slower)")
        self.exact.setToolTip(
            "llama.cpp's fastest CPU kernels give a row slightly different logits inside a batch than alone, so "
            "at near-ties an MTP verify batch can pick another token than plain decoding would. Exact mode turns "
            "those kernels off (weight repacking, the tiled K-quant matmul, split-KV attention). It is chosen "
            "before llama.cpp starts: it takes effect after a restart."
        )
        self.exact.setChecked(ctx.settings.exact)
        self.exact_note = QLabel("")
        self.exact_note.setObjectName("Hint")
        er = QHBoxLayout()
        er.addWidget(self.exact)
        er.addWidget(self.exact_note, 1)
        lay.addLayout(er)
        self.exact.toggled.connect(self._on_exact)
        builds = QGroupBox("Builds")
        bl = QVBoxLayout(builds)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Build", "Backend", "Smoke test", "Selected"])
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().setVisible(False)
        bl.addWidget(self.table)
        row = QHBoxLayout()
        self.status = QLabel("")
        self.status.setObjectName("Hint")
        row.addWidget(self.status, 1)
        self.refresh_btn = QPushButton("Detect again")
        self.use_btn = QPushButton("Use selected build")
        self.build_btn = QPushButton("Build for this machine")
        self.build_btn.setObjectName("Primary")
        self.cancel_btn = QPushButton("Cancel build")
        self.cancel_btn.setEnabled(False)
        self.exact_build_btn = QPushButton("Build exact CPU")
        self.exact_build_btn.setToolTip(
            "A CPU build without llamafile's sgemm: with exact arithmetic on, F16/F32 models then speculate "
            "bit-identically to one-token-at-a-time decoding (quantized models need no special build)"
        )
        for b in (self.refresh_btn, self.use_btn, self.cancel_btn, self.exact_build_btn, self.build_btn):
            row.addWidget(b)
        bl.addLayout(row)
        self.bar = QProgressBar()
        self.bar.setVisible(False)
        bl.addWidget(self.bar)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(5000)
        self.log.setPlaceholderText("The build log streams here.")
        bl.addWidget(self.log)
        lay.addWidget(builds, 1)
        self.rpc = RpcPanel(ctx, models)
        lay.addWidget(self.rpc)
        self.refresh_btn.clicked.connect(self.detect)
        self.build_btn.clicked.connect(lambda: self.build())
        self.exact_build_btn.clicked.connect(lambda: self.build(exact=True))
        self.cancel_btn.clicked.connect(lambda: self.task.cancel() if self.task else None)
        self.use_btn.clicked.connect(self.use_selected)
        self._detected = False

    def showEvent(self, event) -> None:
        if not self._detected:
            self._detected = True
            self.detect()
        super().showEvent(event)

    def detect(self) -> Task:
        task = Task(_detect_and_plan, name="detect")
        task.succeeded.connect(self._show)
        task.failed.connect(lambda e: self.ctx.messages and self.ctx.messages.error("Detection failed", e))
        self.hardware.setHtml("detecting…")
        self._detect_task = task
        return task.start()

    def _show(self, value) -> None:
        d, plan, devices, lib, manifest, rpc, repack = value
        self.plan = plan
        self.detection = d
        rows = [("OS", f"{d.os} {d.arch}"), ("CPU", f"{d.cpu} ({', '.join(d.cpu_features) or 'no SIMD detected'})")]
        if d.memory_bytes:
            rows.append(("Memory", f"{d.memory_bytes / 2**30:.1f} GiB"))
        if d.apple_silicon:
            rows.append(("GPU", "Apple Silicon (Metal)"))
        for g in d.gpus:
            rows.append(("GPU", f"{g.name}, compute capability {g.compute_capability}"))
        tk = d.toolkit
        if tk.version:
            rows.append(
                ("CUDA toolkit", f"{tk.version} ({'driver only, no compiler' if tk.source == 'driver' else tk.source})")
            )
        notes = "".join(f"<li>{html.escape(e)}</li>" for e in d.errors)
        self.hardware.setHtml(
            "<table>"
            + "".join(f"<tr><td><b>{k}</b>&nbsp;</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
            + "</table>"
            + (
                f"<p style='color:#6b7385'>Probes that found nothing:</p><ul style='color:#6b7385'>{notes}</ul>"
                if notes
                else ""
            )
        )
        used = ", ".join(f"{x.name} ({x.type})" for x in devices) or "?"
        selected = manifest.selected or "installed"
        on_gpu = any(x.gpu for x in devices)
        problems = "".join(f"<li style='color:#b3261e'>{html.escape(p)}</li>" for p in plan.problems)
        reasons = "".join(f"<li>{html.escape(r)}</li>" for r in plan.reasons)
        self.plan_view.setHtml(
            f"<p><b>In use:</b> build <i>{selected}</i> on {used} — running on the {'GPU' if on_gpu else 'CPU'}; "
            f"RPC {'built in' if rpc else 'not built in (other machines need a build with RPC)'}."
            f"<br><span style='color:#6b7385'>{html.escape(lib)}</span></p>"
            f"<p>{_repack_line(repack)}</p>"
            f"<p><b>Recommended:</b> {plan.backend.upper()} "
            f'build<br><code>CMAKE_ARGS="{html.escape(plan.cmake_args)}"</code></p>'
            f"<ul>{reasons}{problems}</ul>"
        )
        self.table.setRowCount(len(manifest.builds) + 1)
        items = [("installed", "as installed", "", manifest.selected is None)]
        items += [
            (
                b.name,
                b.backend,
                ("passed" if b.proven else f"FAILED: {b.smoke.get('message')}") if b.smoke else "not run",
                manifest.selected == b.name,
            )
            for b in manifest.builds
        ]
        for r, (name, backend, smoke, sel) in enumerate(items):
            for c, text in enumerate([name, backend, smoke, "yes" if sel else ""]):
                self.table.setItem(r, c, QTableWidgetItem(text))
        self.build_btn.setText(f"Build {plan.backend.upper()} for this machine")

    def plan_for(self, exact: bool):
        """The build the buttons make: the recommended plan, or the exact CPU build."""
        from engine.facade.machine import make_plan

        if self.plan is None:
            return None
        return make_plan(self.detection, exact=True, rpc=True) if exact else self.plan

    def build(self, exact: bool = False) -> Task | None:
        from engine.facade.machine import builds
        from engine.facade.machine import run_smoke

        if self.plan is None or self.task is not None:
            return None
        plan = self.plan_for(exact)

        def work(report, cancel):
            b = builds.build(
                plan,
                log=lambda line: report(("log", line)),
                progress=lambda f, m: report(("progress", f)),
                cancel=cancel,
            )
            report(("log", "running the smoke test…"))
            r = run_smoke(plan.backend, str(b.lib_dir))
            builds.record_smoke(b.name, r)
            return b, r

        self.task = Task(work, name="backend-build")
        self.task.progress.connect(self._on_progress)
        self.task.succeeded.connect(self._built)
        self.task.failed.connect(lambda e: self.ctx.messages and self.ctx.messages.error("Build failed", e))
        self.task.cancelled.connect(lambda: self.status.setText("Build cancelled; nothing was installed."))
        self.task.done.connect(self._build_finished)
        self.log.clear()
        self.bar.setVisible(True)
        self.bar.setValue(0)
        self.build_btn.setEnabled(False)
        self.exact_build_btn.setEnabled(False)
        self.cancel_btn.setEnabled(True)
        return self.task.start()

    def _on_progress(self, item) -> None:
        kind, value = item
        if kind == "log":
            self.log.appendPlainText(value)
        else:
            self.bar.setValue(int(value * 100))

    def _built(self, value) -> None:
        b, report = value
        self.status.setText(f"{b.name}: smoke test {'passed' if report['ok'] else 'FAILED'}: {report['message']}")

    def _on_exact(self, on: bool) -> None:
        from engine.facade import exact as exact_mod

        self.ctx.settings.exact = on
        self.ctx.save_settings()
        if on and not exact_mod.tiled_off():
            self.exact_note.setText("takes effect after MTP Studio restarts")
        elif not on and exact_mod.tiled_off():
            self.exact_note.setText("off from the next restart; models load without it now")
        else:
            self.exact_note.setText("")

    def _build_finished(self) -> None:
        self.task = None
        self.bar.setVisible(False)
        self.build_btn.setEnabled(True)
        self.exact_build_btn.setEnabled(True)
        self.cancel_btn.setEnabled(False)
        self.detect()

    def use_selected(self) -> None:
        from engine.facade.machine import builds
        from engine.facade import MtpStudioError

        row = self.table.currentRow()
        if row < 0:
            return
        name = self.table.item(row, 0).text()
        try:
            if name == "installed":
                m = builds.load_manifest()
                m.selected = None
                builds.save_manifest(m)
            else:
                builds.use(name)
        except MtpStudioError as e:
            if self.ctx.messages is not None:
                self.ctx.messages.error("Cannot use this build", e)
            return
        self.status.setText(f"{name} will be used from the next start of MTP Studio.")
        self.detect()
