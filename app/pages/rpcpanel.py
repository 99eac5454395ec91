"""Other machines (llama.cpp RPC), on the Backend page: share this machine's devices, and
spread the model's layers over other machines'.

Sharing runs `rpc serve` as a child process (:class:`engine.rpc.server.RpcServer`), owned
here and stopped with the window. Using others saves the endpoint list in the settings;
"Check" lists their devices in a child process (llama.cpp aborts on a bad server), and
"Use and reload" reloads the current model across them.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.context import AppContext
from app.tasks import Task
from engine.facade import MtpStudioError
from engine.facade import ModelInfo


class RpcPanel(QGroupBox):
    def __init__(self, ctx: AppContext, models=None, parent: QWidget | None = None):
        super().__init__("Other machines (llama.cpp RPC)", parent)
        self.ctx = ctx
        self.models = models  # ModelController, for "Use and reload"
        self.server = None  # engine.rpc.server.RpcServer while sharing
        self.check_task: Task | None = None
        r = ctx.settings.rpc
        grid = QGridLayout(self)
        grid.setColumnStretch(1, 1)

        grid.addWidget(QLabel("Share this machine"), 0, 0)
        share = QHBoxLayout()
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(r.serve_port)
        self.port.setPrefix("port ")
        self.network = QCheckBox("Accept other machines")
        self.network.setChecked(r.serve_network)
        self.network.setToolTip(
            "Listen on every network address instead of 127.0.0.1 only. llama.cpp's RPC protocol has no "
            "authentication: anyone who can reach the port can use this machine. Trusted networks only."
        )
        self.cache = QCheckBox("Weight cache")
        self.cache.setChecked(r.serve_cache)
        self.cache.setToolTip("Keep received weights on disk, so loading the same model again skips the network")
        self.serve_btn = QPushButton("Start sharing")
        for w in (self.port, self.network, self.cache):
            share.addWidget(w)
        share.addStretch(1)
        share.addWidget(self.serve_btn)
        grid.addLayout(share, 0, 1)
        self.serve_status = QLabel("Not sharing.")
        self.serve_status.setObjectName("Hint")
        self.serve_status.setWordWrap(True)
        grid.addWidget(self.serve_status, 1, 1)

        grid.addWidget(QLabel("Use other machines"), 2, 0)
        use = QHBoxLayout()
        self.endpoints = QLineEdit(", ".join(r.endpoints))
        self.endpoints.setPlaceholderText("host:port of each machine running `mtp-studio rpc serve`, comma-separated")
        self.split = QLineEdit(r.tensor_split)
        self.split.setPlaceholderText("split: by memory")
        self.split.setToolTip(
            "Layer shares, one per device: the remote ones in list order, then this machine (e.g. 3,1,1)"
        )
        self.split.setMaximumWidth(190)
        self.check_btn = QPushButton("Check")
        self.apply_btn = QPushButton("Use and reload")
        self.apply_btn.setObjectName("Primary")
        use.addWidget(self.endpoints, 1)
        use.addWidget(self.split)
        use.addWidget(self.check_btn)
        use.addWidget(self.apply_btn)
        grid.addLayout(use, 2, 1)
        self.devices = QLabel("This machine alone." if not r.endpoints else "Press Check to list the devices.")
        self.devices.setObjectName("Hint")
        self.devices.setWordWrap(True)
        grid.addWidget(self.devices, 3, 1)

        self.serve_btn.clicked.connect(self.toggle_serving)
        self.network.toggled.connect(self._show_serving)
        self.check_btn.clicked.connect(lambda: self.check())
        self.apply_btn.clicked.connect(self.apply)
        self._watch = QTimer(self)  # notices a server that stopped by itself
        self._watch.setInterval(1000)
        self._watch.timeout.connect(self._show_serving)
        self._show_serving()
        if models is not None:
            models.loaded.connect(self._on_loaded)

    def _on_loaded(self, info: ModelInfo) -> None:
        if info.placement:
            self._show_devices({"devices": [], "placement": info.placement})
        elif not self.ctx.settings.rpc.endpoints:
            self.devices.setText("This machine alone.")

    # ---------------------------------------------------------------- sharing
    def options(self):
        from engine.facade.machine import ServerOptions

        return ServerOptions(
            host="0.0.0.0" if self.network.isChecked() else "127.0.0.1",
            port=self.port.value(),
            cache=self.cache.isChecked(),
            allow_network=self.network.isChecked(),  # the tick box is the explicit yes
        )

    def toggle_serving(self) -> None:
        if self.server is not None and self.server.running:
            self.stop_serving()
            return
        from engine.facade.machine import RpcServer

        opts = self.options()
        r = self.ctx.settings.rpc
        r.serve_port, r.serve_network, r.serve_cache = opts.port, opts.allow_network, opts.cache
        self.ctx.save_settings()
        try:
            self.server = RpcServer(opts).start()
        except MtpStudioError as e:
            self.server = None
            if self.ctx.messages is not None:
                self.ctx.messages.error("Could not start sharing", e)
        self._watch.start()
        self._show_serving()

    def stop_serving(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server = None
        self._watch.stop()
        self._show_serving()

    @property
    def serving(self) -> bool:
        return self.server is not None and self.server.running

    def _show_serving(self) -> None:
        running = self.serving
        for w in (self.port, self.network, self.cache):
            w.setEnabled(not running)
        self.serve_btn.setText("Stop sharing" if running else "Start sharing")
        if running:
            ep = self.server.endpoint
            how = (
                f"other machines use --rpc <this machine's address>:{ep.port}"
                if self.network.isChecked()
                else (f"this machine only: --rpc {ep}")
            )
            text = f"<b>Sharing</b> at {ep} (process {self.server.pid}); {how}."
            if self.server.options.warning:
                text += f"<br><span style='color:#b3261e'>{html.escape(self.server.options.warning)}</span>"
        elif self.server is not None:  # it was running and stopped by itself
            text = f"Sharing stopped: {html.escape(self.server.log_tail(2) or 'the server exited')}"
        else:
            text = "Not sharing."
            if self.network.isChecked():
                text += (
                    " <span style='color:#b3261e'>With 'Accept other machines', anyone who can reach the port can "
                    "use this machine: llama.cpp's RPC protocol has no authentication.</span>"
                )
        self.serve_status.setText(text)

    # ---------------------------------------------------------------- using
    def _read(self):
        from engine.facade.machine import parse_endpoints, parse_tensor_split

        eps = parse_endpoints(self.endpoints.text())
        split = parse_tensor_split(self.split.text().strip() or None)
        return eps, split

    def check(self) -> Task | None:
        from engine.facade.machine import survey_in_child

        try:
            eps, split = self._read()
        except MtpStudioError as e:
            self.devices.setText(f"<span style='color:#b3261e'>{html.escape(str(e))}</span>")
            return None
        if not eps:
            self.devices.setText("This machine alone.")
            return None
        current = self.models.current if self.models is not None else None
        if current and current.placement and list(current.rpc) == [str(e) for e in eps]:
            # the loaded model holds these servers (each serves one client): show its placement
            self._show_devices({"devices": [], "placement": current.placement})
            return None
        model = self.models.path if self.models is not None else None
        task = self.check_task = Task(
            lambda report, cancel: survey_in_child(eps, model, list(split) if split else None), name="rpc-check"
        )
        task.succeeded.connect(self._show_devices)
        task.failed.connect(lambda e: self.devices.setText(f"<span style='color:#b3261e'>{html.escape(str(e))}</span>"))
        self.devices.setText("Connecting…")
        return task.start()

    def _show_devices(self, out: dict) -> None:
        from engine.facade.machine import placed_devices

        devices, local = placed_devices(out)
        parts = []
        for d in devices:
            where = d.endpoint or "this machine"
            layers = f", {d.layers} layers" if d.layers is not None else ""
            parts.append(
                f"<b>{html.escape(d.name)}</b> ({html.escape(where)}): "
                f"{d.memory_free / 2**30:.1f} of {d.memory_total / 2**30:.1f} GiB free{layers}"
            )
        tail = " — MTP head and output stay on this machine" if local is not None else ""
        self.devices.setText("; ".join(parts) + tail)

    def apply(self) -> None:
        try:
            eps, split = self._read()
        except MtpStudioError as e:
            self.devices.setText(f"<span style='color:#b3261e'>{html.escape(str(e))}</span>")
            return
        r = self.ctx.settings.rpc
        r.endpoints = [str(e) for e in eps]
        r.tensor_split = ",".join(f"{w:g}" for w in split) if split else ""
        self.ctx.save_settings()
        if self.models is not None and self.models.path:
            self.models.load(self.models.path, self.models.head)
        self.devices.setText("This machine alone." if not eps else "Saved; reloading the model across these machines.")
