"""Chat: streaming conversations with MTP controls and a live line of figures.

Signals:
    generationStarted(job_id)   a reply started generating (the Performance page follows it)
"""

from __future__ import annotations

import json

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.bridge import JobSignals
from app.context import AppContext, ModelController
from app.history import Conversation
from app.widgets.page import page_layout
from engine.runtime import jobs as J
from engine.runtime.decode.depth import DraftDepth, Mtp
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.decode.stats import GenerationStats

DEPTHS = ["auto", "1", "2", "3", "4", "5", "6", "8"]
SOURCES = [("Auto", "auto"), ("Integrated", "integrated"), ("External head", "external"), ("Off", "off")]


def figures_line(stats: GenerationStats | None, live_tps: float | None = None, mtp: str = "") -> str:
    if stats is None and live_tps is None:
        return "ready"
    tps = live_tps if live_tps is not None else stats.tokens_per_second
    parts = [f"{tps:6.1f} tok/s"]
    if stats is not None and stats.drafted:
        parts.append(f"acceptance {stats.acceptance:.2f}")
        parts.append(f"mean accepted {stats.mean_accept_len:.2f}")
    if stats is not None and stats.forced:
        parts.append(f"{stats.forced} forced (free)")
    if stats is not None and stats.sampled:
        parts.append("sampled drafts" if stats.sampled_draft else "sampled")
    if stats is not None:
        parts.append(f"depth {stats.depth_json}")
    if mtp:
        parts.append(f"MTP {mtp}")
    return "  ·  ".join(parts)


class ChatPage(QWidget):
    generationStarted = Signal(int)

    def __init__(self, ctx: AppContext, models: ModelController, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.models = models
        self.conv: Conversation = ctx.chats.new(ctx.settings.chat.system_prompt)
        self.job: JobSignals | None = None  # the reply being generated
        self._reply: list[str] = []
        self._live_tokens = 0
        self._live_stats = GenerationStats()
        self._t_first: float | None = None
        self._grammar: GrammarSpec | None = None  # the attached JSON schema of the reply being made
        self._build()
        self._connect()
        self._load_history()

    # ------------------------------------------------------------------- build
    def _build(self) -> None:
        split = QSplitter(Qt.Orientation.Horizontal, self)
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 6, 0)
        self.new_btn = QPushButton("New chat")
        self.history = QListWidget()
        self.history.setObjectName("History")
        self.no_history = QLabel("Conversations appear here and are kept between sessions.")
        self.no_history.setObjectName("Hint")
        self.no_history.setWordWrap(True)
        ll.addWidget(self.new_btn)
        ll.addWidget(self.history, 1)
        ll.addWidget(self.no_history)
        split.addWidget(left)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(6, 0, 0, 0)
        top = QHBoxLayout()
        self.template_line = QLabel("")
        self.template_line.setObjectName("Hint")
        top.addWidget(self.template_line)
        top.addStretch(1)
        top.addWidget(QLabel("MTP source"))
        self.source = QComboBox()
        for label, value in SOURCES:
            self.source.addItem(label, value)
        top.addWidget(self.source)
        top.addWidget(QLabel("Draft depth"))
        self.depth = QComboBox()
        self.depth.addItems(DEPTHS)
        top.addWidget(self.depth)
        rl.addLayout(top)

        samp = QHBoxLayout()
        samp.addStretch(1)
        samp.addWidget(QLabel("Temperature"))
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.05)
        self.temperature.setToolTip("0: greedy. Above 0 the reply is sampled, still with MTP speculation")
        samp.addWidget(self.temperature)
        samp.addWidget(QLabel("Top-p"))
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        samp.addWidget(self.top_p)
        samp.addWidget(QLabel("Top-k"))
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 100_000)
        self.top_k.setToolTip("0: no top-k limit")
        samp.addWidget(self.top_k)
        self.sampled_draft = QCheckBox("Sampled drafts")
        self.sampled_draft.setToolTip(
            "While sampling, draw the drafts from the MTP head and accept them by rejection sampling: often more "
            "drafts accepted, the same distribution, but not the same text as without speculation for a seed"
        )
        samp.addWidget(self.sampled_draft)
        self.schema_box = QCheckBox("JSON schema")
        self.schema_box.setToolTip("Replies follow a JSON schema (structured output); tokens the schema forces cost nothing")
        samp.addWidget(self.schema_box)
        rl.addLayout(samp)
        self.schema_edit = QPlainTextEdit()
        self.schema_edit.setPlaceholderText('Paste a JSON schema, e.g. {"type": "object", "properties": {...}}')
        self.schema_edit.setFixedHeight(70)
        self.schema_edit.setVisible(False)
        rl.addWidget(self.schema_edit)
        self._show_sampling(self.ctx.settings.chat.__dict__)

        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("System prompt (optional)")
        self.system.setFixedHeight(48)
        rl.addWidget(self.system)
        self.transcript = QTextBrowser()
        self.transcript.setObjectName("Transcript")
        self.transcript.setOpenExternalLinks(True)
        rl.addWidget(self.transcript, 1)
        self.figures = QLabel("loading the model…")
        self.figures.setObjectName("Figures")
        rl.addWidget(self.figures)
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText("Message (Ctrl+Enter to send)")
        self.input.setFixedHeight(80)
        rl.addWidget(self.input)
        row = QHBoxLayout()
        self.hint = QLabel("")
        self.hint.setObjectName("Hint")
        row.addWidget(self.hint, 1)
        self.regen_btn = QPushButton("Regenerate")
        self.stop_btn = QPushButton("Stop")
        self.send_btn = QPushButton("Send")
        self.send_btn.setObjectName("Primary")
        for b in (self.regen_btn, self.stop_btn, self.send_btn):
            row.addWidget(b)
        rl.addLayout(row)
        split.addWidget(right)
        split.setSizes([220, 780])
        lay = page_layout(self, "Chat")
        lay.addWidget(split, 1)

        s = self.ctx.settings
        self.source.setCurrentIndex(max(0, self.source.findData(s.mtp.source)))
        self.depth.setCurrentText(s.mtp.depth if s.mtp.depth in DEPTHS else "auto")
        self.system.setPlainText(s.chat.system_prompt)
        self._set_busy(False)
        self._render()

    def _connect(self) -> None:
        self.send_btn.clicked.connect(self.send)
        self.stop_btn.clicked.connect(self.stop)
        self.regen_btn.clicked.connect(self.regenerate)
        self.new_btn.clicked.connect(self.new_chat)
        self.history.currentItemChanged.connect(self._on_history_pick)
        self.depth.currentTextChanged.connect(self._on_depth)
        for w in (self.temperature, self.top_p):
            w.valueChanged.connect(self._on_sampling)
        self.top_k.valueChanged.connect(self._on_sampling)
        self.sampled_draft.toggled.connect(self._on_sampling)
        self.schema_box.toggled.connect(self.schema_edit.setVisible)
        self.source.currentIndexChanged.connect(self._on_source)
        self.system.textChanged.connect(self._on_system)
        self.models.loaded.connect(self._on_model_loaded)
        self.models.loading.connect(lambda name: self.figures.setText(f"loading {name}…"))
        self.models.loadFailed.connect(lambda e: self.figures.setText("no model loaded"))
        for seq, fn in (("Ctrl+Return", self.send), ("Ctrl+Enter", self.send), ("Escape", self.stop),
                        ("Ctrl+N", self.new_chat), ("Ctrl+R", self.regenerate)):  # fmt: skip
            sc = QShortcut(QKeySequence(seq), self)
            sc.setContext(Qt.ShortcutContext.WindowShortcut)
            sc.activated.connect(fn)

    # ----------------------------------------------------------------- history
    def _load_history(self) -> None:
        self.history.blockSignals(True)
        self.history.clear()
        for conv in self.ctx.chats.all():
            item = QListWidgetItem(conv.title)
            item.setData(Qt.ItemDataRole.UserRole, conv.id)
            self.history.addItem(item)
        self.history.blockSignals(False)
        self.no_history.setVisible(self.history.count() == 0)
        if self.ctx.chats.quarantined and self.ctx.messages is not None:
            names = ", ".join(self.ctx.chats.quarantined)
            self.ctx.messages.error(
                "Some saved chats could not be read",
                f"{names} {'was' if len(self.ctx.chats.quarantined) == 1 else 'were'} damaged and kept beside the "
                f"others with a .bad suffix in {self.ctx.chats.folder}. Your other chats are unaffected.",
            )
            self.ctx.chats.quarantined = []

    # --------------------------------------------------------------- sampling
    SAMPLING_KEYS = ("temperature", "top_p", "top_k", "sampled_draft")

    def _show_sampling(self, values: dict) -> None:
        c = self.ctx.settings.chat
        for w in (self.temperature, self.top_p, self.top_k, self.sampled_draft):
            w.blockSignals(True)
        self.temperature.setValue(float(values.get("temperature", c.temperature)))
        self.top_p.setValue(float(values.get("top_p", c.top_p)))
        self.top_k.setValue(int(values.get("top_k", c.top_k)))
        self.sampled_draft.setChecked(bool(values.get("sampled_draft", c.sampled_draft)))
        for w in (self.temperature, self.top_p, self.top_k, self.sampled_draft):
            w.blockSignals(False)
        self._on_sampling()

    def _on_sampling(self, *_args) -> None:
        """The controls are the chat's sampling settings, saved with it and as defaults."""
        c = self.ctx.settings.chat
        c.temperature = round(self.temperature.value(), 4)
        c.top_p = round(self.top_p.value(), 4)
        c.top_k = int(self.top_k.value())
        c.sampled_draft = self.sampled_draft.isChecked()
        self.sampled_draft.setEnabled(c.temperature > 0)
        self.conv.sampling = {k: getattr(c, k) for k in self.SAMPLING_KEYS}

    def _on_history_pick(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is None or self.job is not None:
            return
        cid = item.data(Qt.ItemDataRole.UserRole)
        conv = next((c for c in self.ctx.chats.all() if c.id == cid), None)
        if conv is not None:
            self.conv = conv
            if conv.sampling:
                self._show_sampling(conv.sampling)
            self.system.blockSignals(True)
            self.system.setPlainText(conv.system)
            self.system.blockSignals(False)
            self._render()

    def new_chat(self) -> None:
        if self.job is not None:
            return
        self.conv = self.ctx.chats.new(self.system.toPlainText())
        self.history.clearSelection()
        self._render()
        self.input.setFocus()

    # ------------------------------------------------------------------ render
    def _render(self) -> None:
        parts = []
        for m in self.conv.messages:
            parts.append(self._bubble(m["role"], m["content"]))
        if not self.conv.messages:
            parts.append('<p style="color:#6b7385">Start a conversation: type a message below.</p>')
        self.transcript.setHtml("".join(parts))
        self.transcript.moveCursor(QTextCursor.MoveOperation.End)

    @staticmethod
    def _bubble(role: str, content: str) -> str:
        who = {"user": "You", "assistant": "Assistant"}.get(role, role.title())
        color = "#3d7bf0" if role == "user" else "#1f8a5b"
        body = html.escape(content).replace("\n", "<br>")
        return f'<p style="margin:10px 0 2px 0"><b style="color:{color}">{who}</b></p><p style="margin:0 0 6px 0">{body}</p>'

    def _append_text(self, text: str) -> None:
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        self.transcript.setTextCursor(cursor)
        self.transcript.ensureCursorVisible()

    # -------------------------------------------------------------------- act
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if not text or self.job is not None:
            return
        if not self._take_schema():
            return
        self.input.clear()
        self.conv.messages.append({"role": "user", "content": text})
        self.ctx.chats.save(self.conv)
        self._start()

    def _take_schema(self) -> bool:
        """Read the attached schema for the next reply; False (said in the hint) if it is not JSON."""
        try:
            self._grammar = self._schema()
        except ValueError as e:
            self.hint.setText(str(e))
            return False
        self.hint.setText("")
        return True

    def _schema(self) -> GrammarSpec | None:
        """The attached JSON schema, or None; ValueError (with words) when it is not JSON."""
        if not self.schema_box.isChecked() or not self.schema_edit.toPlainText().strip():
            return None
        try:
            schema = json.loads(self.schema_edit.toPlainText())
        except ValueError as e:
            raise ValueError(f"The JSON schema is not valid JSON: {e}") from None
        if not isinstance(schema, dict):
            raise ValueError("A JSON schema is a JSON object ({...}).")
        return GrammarSpec.json_schema(schema)

    def regenerate(self) -> None:
        if self.job is not None or not self.conv.messages:
            return
        if self.conv.messages[-1]["role"] == "assistant":
            self.conv.messages.pop()
        if not self.conv.messages or self.conv.messages[-1]["role"] != "user" or not self._take_schema():
            return
        self._start()

    def stop(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _start(self) -> None:
        self.conv.system = self.system.toPlainText()
        self._render()
        self.transcript.append("")
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertHtml(self._bubble("assistant", ""))
        self._reply = []
        self._live_tokens = 0
        self._live_stats = GenerationStats()
        s = self.ctx.settings
        depth = self.depth.currentText()
        job = J.Generate(
            messages=self.conv.chat_messages(),
            max_tokens=s.chat.max_tokens,
            temperature=s.chat.temperature,
            top_p=s.chat.top_p,
            top_k=s.chat.top_k,
            sampled_draft=s.chat.sampled_draft,
            draft_depth=DraftDepth.parse(depth),
            mtp=Mtp.OFF if self.source.currentData() == "off" else Mtp.ON,
            grammar=self._grammar,
        )
        self.conv.sampling = {k: getattr(s.chat, k) for k in self.SAMPLING_KEYS}
        self.job = self.ctx.bridge.run(job)
        self.job.tokens.connect(self._on_tokens)
        self.job.rounds.connect(self._on_rounds)
        self.job.finished.connect(self._on_finished)
        self.job.failed.connect(self._on_failed)
        self._set_busy(True)
        self.generationStarted.emit(self.job.id)

    def _set_busy(self, busy: bool) -> None:
        self.send_btn.setEnabled(not busy)
        self.regen_btn.setEnabled(not busy)
        self.stop_btn.setEnabled(busy)
        self.new_btn.setEnabled(not busy)
        self.history.setEnabled(not busy)
        self.hint.setText("generating… (Esc to stop)" if busy else "Ctrl+Enter send · Esc stop · Ctrl+N new chat · Ctrl+R regenerate")

    # ----------------------------------------------------------------- events
    def _on_tokens(self, text: str, n: int) -> None:
        self._reply.append(text)
        self._live_tokens += n
        self._append_text(text)

    def _on_rounds(self, rounds: list) -> None:
        for r in rounds:
            self._live_stats.record(r)
        last = rounds[-1]
        live_tps = (self._live_tokens - 1) / last.t if last.t > 0 else 0.0
        mtp = (self.models.current or {}).get("mtp", "")
        self.figures.setText(figures_line(self._live_stats if self._live_stats.drafted else None, live_tps, mtp))

    def _on_finished(self, result: object, cancelled: bool) -> None:
        self.job = None
        self._set_busy(False)
        text = "".join(self._reply)
        if isinstance(result, J.GenerateResult):
            text = result.text
            mtp = (self.models.current or {}).get("mtp", "")
            self.figures.setText(figures_line(result.stats, mtp=mtp) + ("  ·  stopped" if cancelled else ""))
            stats = {"tokens": len(result.tokens), "tokens_per_second": result.stats.tokens_per_second,
                     "acceptance": result.stats.acceptance, "stopped": cancelled}  # fmt: skip
        else:
            stats = {"stopped": True}
        self.conv.messages.append({"role": "assistant", "content": text, "stats": stats})
        self.ctx.chats.save(self.conv)
        self._render()
        self._load_history()
        if self.ctx.messages is not None and cancelled:
            self.ctx.messages.status("Stopped.")

    def _on_failed(self, error: object) -> None:
        self.job = None
        self._set_busy(False)
        self._render()
        if self.ctx.messages is not None:
            self.ctx.messages.error("Generation failed", error)  # type: ignore[arg-type]

    # --------------------------------------------------------------- settings
    def _on_depth(self, text: str) -> None:
        self.ctx.settings.mtp.depth = text

    def _on_system(self) -> None:
        self.ctx.settings.chat.system_prompt = self.system.toPlainText()

    def _on_source(self, _index: int) -> None:
        value = self.source.currentData()
        if value == self.ctx.settings.mtp.source:
            return
        self.ctx.settings.mtp.source = value
        if value != "off":  # "off" is per request: the loaded MTP context stays ready
            self.models.reload(value)

    def _on_model_loaded(self, info: dict) -> None:
        quant = f" {info['quantization']}" if info.get("quantization") else ""
        self.figures.setText(f"ready: {info.get('name')}{quant} · MTP {info.get('mtp')} · context {info.get('n_ctx')}")
        self.figures.setToolTip(f"Chat template: {info.get('chat_template')}")
        self.template_line.setText(f"Chat template: {info.get('chat_template')}")
        self.template_line.setToolTip(f"Speculation: {info.get('identity')}")
        if info.get("fallbacks") and self.ctx.messages is not None:
            self.ctx.messages.error("The model needed a fallback to run safely", "\n\n".join(info["fallbacks"]))
