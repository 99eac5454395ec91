"""Server: the local OpenAI-compatible endpoint over the same engine — start/stop,
address, API key, CORS, the prompt cache (budget and figures), and a live request log
(never headers, never the key)."""

from __future__ import annotations

import secrets
import time
from collections import Counter
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.context import AppContext
from app.endpoint import Endpoint
from app.widgets.page import page_layout
from engine.facade import DEFAULT_PROMPT_CACHE_MB
from engine.facade import CacheFigures

if TYPE_CHECKING:
    from engine.facade.endpoint import RequestEntry


def cache_text(c: CacheFigures) -> str:
    """One line of prompt-cache figures."""
    if not c.budget_bytes:
        return "off: every prompt that leaves the loaded conversation is decoded from its start"
    return (
        f"{c.entries} snapshots, {c.bytes / 2**20:.1f} of {c.budget_bytes / 2**20:.0f} MB, {c.evicted} evicted\n"
        f"{c.hits} hits, {c.live} resumed live, {c.misses} misses  ·  {c.restored_tokens} tokens restored"
    )


#: what each API answers on, for the page (engine.server.routes)
ROUTES = (
    ("OpenAI", "/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/rerank, /v1/models"),
    ("Anthropic", "/v1/messages, /v1/messages/count_tokens"),
    ("Ollama", "/api/chat, /api/generate, /api/embed, /api/tags, /api/show, /api/ps, /api/version"),
)
_API_NAMES = {"openai": "OpenAI", "anthropic": "Anthropic", "ollama": "Ollama"}


def routes_text() -> str:
    return "  ·  ".join(f"{name}: {paths}" for name, paths in ROUTES)


def api_counts_text(counts: Counter) -> str:
    return "Requests by API: " + "  ·  ".join(f"{_API_NAMES[k]} {counts.get(k, 0)}" for k in _API_NAMES)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h {s % 3600 // 60} min"


class ServerPage(QWidget):
    MAX_ROWS = 500

    def __init__(self, ctx: AppContext, endpoint: Endpoint, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        #: the app's HTTP endpoint service: this page shows it and asks it to start and stop
        self.endpoint = endpoint
        self.endpoint.request.connect(self._log_request)
        self.endpoint.started.connect(self._show_started)
        self.endpoint.stopped.connect(self._show_stopped)
        s = ctx.settings.server
        lay = page_layout(self, "Server")
        box = QGroupBox("Local endpoint: OpenAI, Anthropic and Ollama APIs")
        box.setMaximumWidth(720)
        form = QFormLayout(box)
        self.host = QLineEdit(s.host)
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(s.port)
        self.key = QLineEdit(s.api_key)
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("none (required to listen beyond this machine)")
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        self.gen_key = QPushButton("Generate")
        key_row.addWidget(self.gen_key)
        self.cors = QLineEdit(", ".join(s.cors_origins))
        self.cors.setPlaceholderText("off (e.g. http://localhost:3000)")
        self.autostart = QCheckBox("Start with MTP Studio")
        self.autostart.setChecked(s.autostart)
        form.addRow("Address", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", key_row)
        form.addRow("Allowed browser origins", self.cors)
        form.addRow("", self.autostart)
        lay.addWidget(box)
        row = QHBoxLayout()
        self.state = QLabel("stopped")
        self.state.setObjectName("Figures")
        row.addWidget(self.state, 1)
        self.toggle = QPushButton("Start")
        self.toggle.setObjectName("Primary")
        row.addWidget(self.toggle)
        lay.addLayout(row)
        self.routes = QLabel(routes_text())
        self.routes.setObjectName("Hint")
        self.routes.setWordWrap(True)
        self.routes.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.routes)
        self.per_api = Counter()
        self.api_counts = QLabel(api_counts_text(self.per_api))
        self.api_counts.setObjectName("Figures")
        lay.addWidget(self.api_counts)
        lay.addWidget(self._models_box())
        lay.addWidget(self._cache_box())
        lay.addWidget(self._slots_box())
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["Time", "Method", "Path", "Status", "ms"])
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        hint = QLabel(
            "Every request is listed here while the server runs: method, path, status and time; "
            "never headers, bodies or keys."
        )
        hint.setObjectName("Hint")
        lay.addWidget(hint)
        lay.addWidget(self.table, 1)
        self.toggle.clicked.connect(self.toggle_server)
        self.gen_key.clicked.connect(
            lambda: (self.key.setText(secrets.token_urlsafe(24)), self.key.setEchoMode(QLineEdit.EchoMode.Normal))
        )

    def _models_box(self) -> QGroupBox:
        """Which models the endpoint serves, and the ones loaded now: memory, requests, idle
        time, when each unloads, and Unload."""
        s = self.ctx.settings.server
        box = QGroupBox("Models")
        box.setMaximumWidth(720)
        form = QFormLayout(box)
        self.serve_library = QCheckBox("Serve every library model by name, loaded when a request names it")
        self.serve_library.setChecked(s.serve_library)
        self.idle_ttl = QSpinBox()
        self.idle_ttl.setRange(0, 24 * 60)
        self.idle_ttl.setSuffix(" min")
        self.idle_ttl.setSpecialValueText("never")
        self.idle_ttl.setValue(s.idle_ttl_min)
        self.idle_ttl.setToolTip(
            "A model loaded on demand is unloaded after this long without requests "
            "(requests may ask for their own: Ollama's keep_alive, LM Studio's ttl)."
        )
        self.max_models = QSpinBox()
        self.max_models.setRange(1, 16)
        self.max_models.setValue(s.max_models)
        self.max_models.setToolTip(
            "Models loaded at once; the least recently used idle one is unloaded to make room, "
            "as is any that would not fit the memory beside the others."
        )
        self.loaded_table = QTableWidget(0, 6)
        self.loaded_table.setHorizontalHeaderLabels(["Model", "Memory", "Requests", "Idle", "Unloads", ""])
        self.loaded_table.verticalHeader().setVisible(False)
        self.loaded_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.loaded_table.setMinimumHeight(110)  # three rows show without scrolling
        self.loaded_table.setMaximumHeight(150)
        form.addRow("", self.serve_library)
        form.addRow("Unload when idle", self.idle_ttl)
        form.addRow("At most", self.max_models)
        form.addRow(self.loaded_table)
        self._loaded_timer = QTimer(self)
        self._loaded_timer.timeout.connect(self.refresh_loaded)
        self._loaded_timer.start(1000)
        self.refresh_loaded()
        return box

    def loaded_rows(self) -> list:
        """The loaded models as the table shows them (the endpoint service's rows)."""
        return self.endpoint.loaded()

    def refresh_loaded(self) -> None:
        rows = self.loaded_rows()
        self.loaded_table.setRowCount(len(rows))
        for r, m in enumerate(rows):
            state = m.state if m.state != "loaded" else ("in use" if m.users else None)
            idle = "–" if m.idle_s < 0 else state or _duration(m.idle_s)
            unloads = (
                ("by hand" if m.pinned else "kept") if m.expires_in_s is None else f"in {_duration(m.expires_in_s)}"
            )
            cells = [
                m.name,
                f"{m.memory_bytes / 2**20:.0f} MB" if m.memory_bytes else "–",
                "–" if m.requests < 0 else str(m.requests),
                idle,
                unloads,
            ]
            for c, text in enumerate(cells):
                self.loaded_table.setItem(r, c, QTableWidgetItem(text))
            button = QPushButton("Unload")
            button.setEnabled(m.state == "loaded")
            button.clicked.connect(lambda _=False, name=m.name: self.unload(name))
            self.loaded_table.setCellWidget(r, 5, button)

    def unload(self, name: str) -> None:
        """Unload ``name`` (after its running requests end)."""
        self.endpoint.unload(name)

    def _cache_box(self) -> QGroupBox:
        """The prompt cache both the chats and the endpoint use: its budget, and what it holds."""
        box = QGroupBox("Prompt cache")
        box.setMaximumWidth(720)
        form = QFormLayout(box)
        self.cache_mb = QSpinBox()
        self.cache_mb.setRange(0, 1 << 20)
        self.cache_mb.setSingleStep(512)
        self.cache_mb.setSuffix(" MB")
        self.cache_mb.setSpecialValueText("off")
        self.cache_mb.setValue(self.ctx.settings.prompt_cache_mb)
        self.cache_mb.setToolTip(
            "Host memory for snapshots of conversations, so each one resumes where it was instead of "
            f"decoding its whole history again (default {DEFAULT_PROMPT_CACHE_MB} MB). Hybrid models such as "
            "Qwen3.5/3.6 cannot roll their state back and need them most."
        )
        self.cache_figures = QLabel()
        self.cache_figures.setObjectName("Figures")
        self.cache_figures.setWordWrap(True)
        form.addRow("Memory", self.cache_mb)
        form.addRow("Now", self.cache_figures)
        self.cache_mb.valueChanged.connect(self._set_cache_mb)
        self._cache_timer = QTimer(self)
        self._cache_timer.timeout.connect(self.refresh_cache)
        self._cache_timer.start(1000)
        self.refresh_cache()
        return box

    def _slots_box(self) -> QGroupBox:
        """Requests decoded together: how many (the next load's), and what each slot of the
        loaded model is doing now."""
        box = QGroupBox("Parallel requests")
        box.setMaximumWidth(720)
        form = QFormLayout(box)
        self.parallel = QSpinBox()
        self.parallel.setRange(1, 16)
        self.parallel.setValue(self.ctx.settings.parallel)
        self.parallel.setToolTip(
            "Requests one model decodes together, each with MTP (the window's chat and every client of the endpoint). "
            "Each has a KV cache of the context length; fewer are used when they do not fit. Applies from the "
            "next load."
        )
        self.parallel.valueChanged.connect(lambda n: setattr(self.ctx.settings, "parallel", int(n)))
        self.slot_table = QTableWidget(0, 6)
        self.slot_table.setHorizontalHeaderLabels(["Slot", "State", "Tokens", "tok/s", "Depth", "Acceptance"])
        self.slot_table.verticalHeader().setVisible(False)
        self.slot_table.horizontalHeader().setStretchLastSection(True)
        self.slot_table.setMaximumHeight(150)
        self.slot_figures = QLabel()
        self.slot_figures.setObjectName("Figures")
        form.addRow("Next load", self.parallel)
        form.addRow(self.slot_table)
        form.addRow("Now", self.slot_figures)
        self._slot_timer = QTimer(self)
        self._slot_timer.timeout.connect(self.refresh_slots)
        self._slot_timer.start(500)
        self.refresh_slots()
        return box

    def refresh_slots(self) -> None:
        slots = [s for per_model in self.ctx.bridge.slots().values() for s in per_model]
        self.slot_table.setRowCount(len(slots))
        for r, s in enumerate(slots):
            acc = s.acceptance
            cells = [
                str(s.slot),
                s.state,
                str(s.tokens),
                f"{s.tokens_per_second:.1f}",
                str(s.depth) if s.busy else "–",
                "–" if acc is None else f"{acc:.0%}",
            ]
            for c, text in enumerate(cells):
                self.slot_table.setItem(r, c, QTableWidgetItem(text))
        busy = [s for s in slots if s.busy]
        if not slots:
            self.slot_figures.setText(
                "one request at a time (the loaded model has no slots)"
                if self.ctx.bridge.models()
                else "no model loaded"
            )
        else:
            total = sum(s.tokens_per_second for s in busy)
            text = f"{len(busy)} of {len(slots)} busy · {total:.1f} tok/s together"
            # MTP auto's depth for steps of n sequences (one choice per step: slots' batchdepth)
            steps = {n: d for per in self.ctx.bridge.step_depths().values() for n, d in per.items()}
            if steps:
                text += " · auto's depth in steps of " + ", ".join(f"{n}: {d}" for n, d in sorted(steps.items()))
            self.slot_figures.setText(text)

    def _set_cache_mb(self, mb: int) -> None:
        self.ctx.settings.prompt_cache_mb = mb
        self.ctx.bridge.set_prompt_cache_mb(mb)
        self.refresh_cache()

    def refresh_cache(self) -> None:
        info = self.ctx.bridge.prompt_cache_info()
        self.cache_figures.setText(cache_text(info))

    def _save_settings(self) -> None:
        """The form's values into the settings the endpoint starts with."""
        s = self.ctx.settings.server
        s.host, s.port, s.api_key = self.host.text().strip() or "127.0.0.1", self.port.value(), self.key.text().strip()
        s.cors_origins = [o.strip() for o in self.cors.text().split(",") if o.strip()]
        s.autostart = self.autostart.isChecked()
        s.serve_library, s.idle_ttl_min, s.max_models = (
            self.serve_library.isChecked(),
            self.idle_ttl.value(),
            self.max_models.value(),
        )

    def toggle_server(self) -> None:
        self.stop() if self.endpoint.running else self.start()

    def start(self) -> bool:
        """Start the endpoint with the form's settings; False (and a message) when it cannot."""
        self._save_settings()
        return self.endpoint.try_start()

    def stop(self) -> None:
        self.endpoint.stop()

    def _show_started(self, url: str) -> None:
        key = "required" if self.ctx.settings.server.api_key else "off"
        state = f"running at {url}/v1  ·  API key {key}"
        for name, info in self.ctx.bridge.models().items():
            sees = " and ".join(("images" if m == "vision" else m) for m in info.modalities)
            state += f"\n{name}: chat template {info.chat_template}" + (f"  ·  takes {sees}" if sees else "")
        if (residency := self.endpoint.residency) is not None:
            state += f"\n{len(residency.catalog.items())} library model(s) served by name, loaded on demand"
        self.state.setText(state)
        self.toggle.setText("Stop")
        self._editable(False)

    def _show_stopped(self) -> None:
        self.state.setText("stopped")
        self.toggle.setText("Start")
        self._editable(True)

    def _editable(self, on: bool) -> None:
        """The settings a running endpoint was started with are read-only until it stops."""
        for w in (
            self.host,
            self.port,
            self.key,
            self.cors,
            self.gen_key,
            self.serve_library,
            self.idle_ttl,
            self.max_models,
        ):
            w.setEnabled(on)
        self.refresh_loaded()

    def _log_request(self, e: RequestEntry) -> None:
        self.per_api[e.api] += 1
        self.api_counts.setText(api_counts_text(self.per_api))
        self.table.insertRow(0)
        values = [time.strftime("%H:%M:%S", time.localtime(e.time)), e.method, e.path, str(e.status), f"{e.ms:.0f}"]
        for c, v in enumerate(values):
            self.table.setItem(0, c, QTableWidgetItem(v))
        if self.table.rowCount() > self.MAX_ROWS:
            self.table.removeRow(self.table.rowCount() - 1)
