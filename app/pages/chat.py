"""Chat: streaming conversations with MTP controls and a live line of figures.

Replies render as Markdown (code blocks with a Copy link); a thinking model's thinking
shows in a block above the answer (live while it thinks, folded once done), and tool
calls as cards (app.pages.chatview draws them).

Signals:
    generationStarted(job_id)   a reply started generating (the Performance page follows it)
"""

from __future__ import annotations

import json
import time

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
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
from app.pages import chatview
from app.pages.chatfigures import context_line, figures_line
from app.widgets.page import page_layout
from engine.runtime import jobs as J
from engine.runtime.decode.depth import DraftDepth, Mtp
from engine.runtime.decode.grammar import GrammarSpec
from engine.runtime.decode.stats import GenerationStats
from engine.runtime.prompt.reply import Part, Reply

LIVE_MS = 40  # the streaming reply is redrawn at most this often (and long ones less often)
DEPTHS = ["auto", "1", "2", "3", "4", "5", "6", "8"]
SOURCES = [("Auto", "auto"), ("Integrated", "integrated"), ("External head", "external"), ("Off", "off")]


class ChatPage(QWidget):
    generationStarted = Signal(int)

    def __init__(self, ctx: AppContext, models: ModelController, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.models = models
        self.conv: Conversation = ctx.chats.new(ctx.settings.chat.system_prompt)
        self.job: JobSignals | None = None  # the reply being generated
        self._reply: list[str] = []
        self._split: Reply | None = None  # the reply so far, split (None: all content)
        self._live_tokens = 0
        self._live_stats = GenerationStats()
        self._t_first: float | None = None  # when the first text arrived
        self._think_n = 0  # tokens thought so far (the engine's count replaces it at the end)
        self._think_s: float | None = None  # seconds thought, once the answer started
        self._live_start: int | None = None  # where the streaming reply starts in the transcript
        self._live_ms = 0.0  # what the last redraw of it cost
        self._codes: list[str] = []  # the transcript's code blocks (Copy links copy:N)
        self._hist_codes = 0  # how many of them the saved messages hold
        self._open: set[str] = set()  # thinking blocks opened: message index, or "live"
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
        self.think_box = QCheckBox("Think")
        self.think_box.setChecked(True)
        self.think_box.setEnabled(False)
        self.think_box.setToolTip("Load a model whose chat template can turn thinking on and off")
        samp.addWidget(self.think_box)
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
        self.transcript.setOpenLinks(False)  # copy:, think: and web links: _on_anchor
        self._live_timer = QTimer(self)
        self._live_timer.setSingleShot(True)
        self._live_timer.timeout.connect(self._render_live)
        rl.addWidget(self.transcript, 1)
        self.figures = QLabel("loading the model…")
        self.figures.setObjectName("Figures")
        self.figures.setWordWrap(True)  # a long line of figures wraps instead of widening the window
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
        self.think_box.toggled.connect(self._on_sampling)
        self.transcript.anchorClicked.connect(self._on_anchor)
        self.schema_box.toggled.connect(self.schema_edit.setVisible)
        self.source.currentIndexChanged.connect(self._on_source)
        self.system.textChanged.connect(self._on_system)
        self.models.loaded.connect(self._on_model_loaded)
        self.models.loading.connect(lambda name: self.figures.setText(f"loading {name}…"))
        self.models.loadFailed.connect(lambda e: self.figures.setText("no model loaded"))
        self.models.loadFailed.connect(lambda e: self._show_think(None))
        self.models.unloaded.connect(lambda: self._show_think(None))
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
        controls = (self.temperature, self.top_p, self.top_k, self.sampled_draft, self.think_box)
        for w in controls:
            w.blockSignals(True)
        self.temperature.setValue(float(values.get("temperature", c.temperature)))
        self.top_p.setValue(float(values.get("top_p", c.top_p)))
        self.top_k.setValue(int(values.get("top_k", c.top_k)))
        self.sampled_draft.setChecked(bool(values.get("sampled_draft", c.sampled_draft)))
        self.think_box.setChecked(values.get("think", True) is not False)
        for w in controls:
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
        self.conv.sampling = self._chat_sampling()

    def _chat_sampling(self) -> dict:
        """The chat's own settings: sampling, and ``think: False`` when thinking is off."""
        out = {k: getattr(self.ctx.settings.chat, k) for k in self.SAMPLING_KEYS}
        if not self.think_box.isChecked():
            out["think"] = False
        return out

    def _show_think(self, info: dict | None) -> None:
        """The Think box works when the model's template takes ``enable_thinking``."""
        toggle = bool(info and info.get("think_toggle"))
        self.think_box.setEnabled(toggle)
        if toggle:
            tip = "Let the model think before it answers (the thinking shows above the answer, folded)"
        elif info and info.get("thinks"):
            tip = "This model always thinks: its chat template has no switch for it"
        else:
            tip = "This model does not think (its chat template writes no <think> blocks)"
        self.think_box.setToolTip(tip)

    def _on_history_pick(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is None or self.job is not None:
            return
        cid = item.data(Qt.ItemDataRole.UserRole)
        conv = next((c for c in self.ctx.chats.all() if c.id == cid), None)
        if conv is not None:
            self.conv = conv
            self._open.clear()
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
        self._open.clear()
        self.history.clearSelection()
        self._render()
        self.input.setFocus()

    # ------------------------------------------------------------------ render
    def _render(self, keep_scroll: bool = False) -> None:
        """The whole transcript: the saved messages, then the reply being made."""
        bar = self.transcript.verticalScrollBar()
        was = bar.value()
        self._codes = []
        parts = [self._message_html(i, m) for i, m in enumerate(self.conv.messages)]
        if not self.conv.messages:
            parts.append('<p style="color:#6b7385">Start a conversation: type a message below.</p>')
        self.transcript.setHtml("".join(parts))
        self._hist_codes = len(self._codes)
        self._live_start = None
        if self.job is not None:
            self._render_live()
        if keep_scroll:
            bar.setValue(was)
        else:
            self.transcript.moveCursor(QTextCursor.MoveOperation.End)

    def _message_html(self, i: int, m: dict) -> str:
        if m["role"] != "assistant":
            return chatview.plain_html(m["role"], m["content"])
        return chatview.assistant_html(m, str(i), self._codes, expanded=str(i) in self._open)

    def _live_message(self) -> tuple[dict, bool]:
        """The reply so far as a history message, and whether it is still thinking."""
        if self._split is not None:
            r = self._split
            calls = [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in r.calls]
            msg = {"content": r.content, "reasoning": r.reasoning, "calls": calls}
            return msg, bool(r.reasoning) and not r.content and not r.calls
        text = "".join(self._reply)
        thinking = text.lstrip().startswith(chatview.THINK_START) and chatview.THINK_END not in text
        return {"content": text}, thinking

    def _thinking_header(self) -> str:
        elapsed = time.monotonic() - self._t_first if self._t_first is not None else 0.0
        n = self._think_n
        head = f"Thinking… {n} token{'s' if n != 1 else ''}"
        return head + (f", {n / elapsed:.1f} tok/s" if elapsed > 0.05 else "")

    def _render_live(self) -> None:
        """Redraw the streaming reply in place, after the saved messages."""
        if self.job is None:
            return
        bar = self.transcript.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.transcript.document())
        t0 = time.perf_counter()
        if self._live_start is None:
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertBlock()
            self._live_start = cursor.position()
        else:
            cursor.setPosition(self._live_start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
        del self._codes[self._hist_codes :]
        msg, thinking = self._live_message()
        header = self._thinking_header() if thinking else None
        if not thinking and msg.get("reasoning"):
            msg["stats"] = {"thinking_tokens": self._think_n, "thinking_s": self._think_s}
        cursor.insertHtml(chatview.assistant_html(msg, "live", self._codes, expanded="live" in self._open,
                                                  live_header=header))  # fmt: skip
        if at_end:
            bar.setValue(bar.maximum())
        self._live_ms = (time.perf_counter() - t0) * 1000

    def _on_anchor(self, url: QUrl) -> None:
        scheme, what = url.scheme(), url.path()
        if scheme == "copy" and what.isdigit() and int(what) < len(self._codes):
            QApplication.clipboard().setText(self._codes[int(what)])
            if self.ctx.messages is not None:
                self.ctx.messages.status("Code copied to the clipboard.")
        elif scheme == "think":
            self._open.symmetric_difference_update({what})
            self._render(keep_scroll=True)
        elif scheme in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

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
        self._reply = []
        self._split = None
        self._live_tokens = 0
        self._live_stats = GenerationStats()
        self._t_first, self._think_n, self._think_s, self._live_ms = None, 0, None, 0.0
        self._open.discard("live")
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
            chat_template_kwargs=self._template_kwargs(),
            thinking_budget=s.chat.thinking_budget or None,  # 0 in the settings: unlimited
        )
        self.conv.sampling = self._chat_sampling()
        self.job = self.ctx.bridge.run(job)
        self._render()
        self.job.parts.connect(self._on_parts)
        self.job.tokens.connect(self._on_tokens)
        self.job.rounds.connect(self._on_rounds)
        self.job.finished.connect(self._on_finished)
        self.job.failed.connect(self._on_failed)
        self._set_busy(True)
        self.generationStarted.emit(self.job.id)

    def _template_kwargs(self) -> dict | None:
        """Thinking off for this reply when the Think box is unticked (and can be)."""
        if self.think_box.isEnabled() and not self.think_box.isChecked():
            return {"enable_thinking": False}
        return None

    def _set_busy(self, busy: bool) -> None:
        self.send_btn.setEnabled(not busy)
        self.regen_btn.setEnabled(not busy)
        self.stop_btn.setEnabled(busy)
        self.new_btn.setEnabled(not busy)
        self.history.setEnabled(not busy)
        self.hint.setText("generating… (Esc to stop)" if busy else "Ctrl+Enter send · Esc stop · Ctrl+N new chat · Ctrl+R regenerate")

    # ----------------------------------------------------------------- events
    def _on_parts(self, parts: list[Part]) -> None:
        if self._split is None:
            self._split = Reply()
        self._split.add(parts)

    def _on_tokens(self, text: str, n: int) -> None:
        now = time.monotonic()
        if self._t_first is None:
            self._t_first = now
        self._reply.append(text)
        self._live_tokens += n
        msg, thinking = self._live_message()
        if thinking:
            self._think_n += n
        elif msg.get("reasoning") and self._think_s is None:
            self._think_s = now - self._t_first
        if not self._live_timer.isActive():  # the GUI thread spends at most ~1/4 of its time redrawing
            self._live_timer.start(max(LIVE_MS, int(4 * self._live_ms)))

    def _on_rounds(self, rounds: list) -> None:
        for r in rounds:
            self._live_stats.record(r)
        last = rounds[-1]
        live_tps = (self._live_tokens - 1) / last.t if last.t > 0 else 0.0
        mtp = (self.models.current or {}).get("mtp", "")
        self.figures.setText(figures_line(self._live_stats if self._live_stats.drafted else None, live_tps, mtp))

    def _on_finished(self, result: object, cancelled: bool) -> None:
        self.job = None
        self._live_timer.stop()
        self._set_busy(False)
        msg, _ = self._live_message()
        think_n = self._think_n
        if isinstance(result, J.GenerateResult):
            if result.reply is not None:
                self._split = result.reply
                msg, _ = self._live_message()
            else:
                msg = {"content": result.text}
            think_n = result.stats.thinking_tokens or think_n
            mtp = (self.models.current or {}).get("mtp", "")
            self.figures.setText(figures_line(result.stats, mtp=mtp) + ("  ·  stopped" if cancelled else ""))
            stats = {"tokens": len(result.tokens), "tokens_per_second": result.stats.tokens_per_second,
                     "acceptance": result.stats.acceptance, "stopped": cancelled}  # fmt: skip
        else:
            stats = {"stopped": True}
        message = {"role": "assistant", "content": msg["content"], "stats": stats}
        if msg.get("reasoning") or chatview.split_raw(msg["content"])[0]:
            if self._think_s is None and self._t_first is not None:
                self._think_s = time.monotonic() - self._t_first
            stats["thinking_tokens"] = think_n
            stats["thinking_s"] = round(self._think_s or 0.0, 2)
        if msg.get("reasoning"):
            message["reasoning"] = msg["reasoning"]
        if msg.get("calls"):
            message["calls"] = msg["calls"]
        self.conv.messages.append(message)
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
        self._show_think(info)
        quant = f" {info['quantization']}" if info.get("quantization") else ""
        self.figures.setText(f"ready: {info.get('name')}{quant} · MTP {info.get('mtp')} · {context_line(info)}")
        self.figures.setToolTip(f"Chat template: {info.get('chat_template')}")
        self.template_line.setText(f"Chat template: {info.get('chat_template')}")
        self.template_line.setToolTip(f"Speculation: {info.get('identity')}")
        if info.get("fallbacks") and self.ctx.messages is not None:
            self.ctx.messages.error("The model needed a fallback to run safely", "\n\n".join(info["fallbacks"]))
