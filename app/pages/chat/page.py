"""Chat: streaming conversations with MTP controls and a live line of figures.

The page wires its parts and runs replies: the conversation list, the controls
(:mod:`app.pages.chat.controls`), the transcript (:mod:`app.pages.chat.transcript`, which
draws the reply being made, an :class:`app.pages.chat.livereply.LiveReply` fed from the
job's bridge signals), the figures line (:mod:`app.pages.chat.figures`), and the input
with Send, Stop and Regenerate. Pictures pasted, dropped or chosen with Attach image…
wait in a tray above the input (:mod:`app.pages.chat.attach`) and go with the next
message, kept with the conversation. Every engine event reaches it through the one
bridge (:mod:`app.bridge`). GUI thread.

Signals:
    generationStarted(job_id)   a reply started generating (the Performance page follows it)
    findProjector()             the user asked for the loaded model's projector (the window
                                shows the Models page's Hugging Face browser)
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.bridge import JobSignals
from app.context import AppContext, ModelController
from app.history import Conversation, has_pictures
from app.messages import user_text
from app.pages.chat.attach import AttachTray, ChatInput
from app.pages.chat.controls import ChatControls
from app.pages.chat.figures import context_line, figures_line
from app.pages.chat.images import FILE_FILTER, saved
from app.pages.chat.livereply import LiveReply
from app.pages.chat.transcript import Transcript
from app.widgets.page import page_layout
from engine.facade import GrammarSpec, J, ModelInfo, Part


class ChatPage(QWidget):
    generationStarted = Signal(int)
    findProjector = Signal()

    def __init__(self, ctx: AppContext, models: ModelController, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.models = models
        self.conv: Conversation = ctx.chats.new(ctx.settings.chat.system_prompt)
        self.job: JobSignals | None = None  # the reply being generated
        self.live = LiveReply()  # that reply (or the last one)
        self._grammar: GrammarSpec | None = None  # the attached JSON schema of the reply being made
        self._error: str | None = None  # why the last turn got no reply (shown under it)
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
        self.controls = c = ChatControls(self.ctx)
        rl.addWidget(c)
        # the controls' widgets, by the names the page's users know them by
        self.template_line, self.source, self.depth = c.template_line, c.source, c.depth
        self.temperature, self.top_p, self.top_k, self.sampled_draft = c.temperature, c.top_p, c.top_k, c.sampled_draft
        self.suffix_drafts = c.suffix_drafts
        self.think_box, self.schema_box, self.schema_edit = c.think_box, c.schema_box, c.schema_edit
        self.conv.sampling = c.chat_sampling()

        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("System prompt (optional)")
        self.system.setFixedHeight(48)
        rl.addWidget(self.system)
        self.transcript = Transcript()
        rl.addWidget(self.transcript, 1)
        self.figures = QLabel("loading the model…")
        self.figures.setObjectName("Figures")
        self.figures.setWordWrap(True)  # a long line of figures wraps instead of widening the window
        rl.addWidget(self.figures)
        self.tray = AttachTray()
        rl.addWidget(self.tray)
        self.input = ChatInput()
        self.input.setPlaceholderText("Message (Ctrl+Enter to send; paste or drop pictures to attach them)")
        self.input.setFixedHeight(80)
        rl.addWidget(self.input)
        row = QHBoxLayout()
        self.attach_btn = QPushButton("Attach image…")
        self.attach_btn.setToolTip(
            "Send pictures with the message (PNG, JPEG, GIF, BMP); you can also paste or drop them"
        )
        row.addWidget(self.attach_btn)
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

        self.system.setPlainText(self.ctx.settings.chat.system_prompt)
        self._set_busy(False)
        self._render()

    def _connect(self) -> None:
        self.send_btn.clicked.connect(self.send)
        self.stop_btn.clicked.connect(self.stop)
        self.regen_btn.clicked.connect(self.regenerate)
        self.new_btn.clicked.connect(self.new_chat)
        self.attach_btn.clicked.connect(self.attach_dialog)
        self.input.picturesOffered.connect(self.tray.offer)
        self.transcript.picturesOffered.connect(self.tray.offer)
        self.tray.changed.connect(self._update_sight)
        self.tray.findProjector.connect(self.findProjector)
        self.history.currentItemChanged.connect(self._on_history_pick)
        self.controls.samplingChanged.connect(self._on_sampling)
        self.controls.sourceChanged.connect(self.models.reload)
        self.controls.modelChosen.connect(lambda eid: self.models.load_entry(self.ctx.library.get(eid)))
        # the picker follows every load and unload, the endpoint's on-demand ones included
        self.ctx.bridge.modelsChanged.connect(
            lambda _m: self.controls.refresh_models(self.models.current.path if self.models.current else None)
        )
        self.models.unloaded.connect(lambda: self.controls.refresh_models(None))
        self.transcript.codeCopied.connect(self._on_code_copied)
        self.system.textChanged.connect(self._on_system)
        self.models.loaded.connect(self._on_model_loaded)
        self.models.loading.connect(lambda name: self.figures.setText(f"loading {name}…"))
        self.models.loadFailed.connect(lambda e: self.figures.setText("no model loaded"))
        self.models.loadFailed.connect(lambda e: self.controls.show_think(None))
        self.models.unloaded.connect(lambda: self.controls.show_think(None))
        self.models.unloaded.connect(self._update_sight)
        self.models.loadFailed.connect(lambda _e: self._update_sight())
        for seq, fn in (
            ("Ctrl+Return", self.send),
            ("Ctrl+Enter", self.send),
            ("Escape", self.stop),
            ("Ctrl+N", self.new_chat),
            ("Ctrl+R", self.regenerate),
        ):
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

    def _on_history_pick(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is None or self.job is not None:
            return
        cid = item.data(Qt.ItemDataRole.UserRole)
        conv = next((c for c in self.ctx.chats.all() if c.id == cid), None)
        if conv is not None:
            self.conv = conv
            self.transcript.close_blocks()
            if conv.sampling:
                self.controls.show_sampling(conv.sampling)
            self.system.blockSignals(True)
            self.system.setPlainText(conv.system)
            self.system.blockSignals(False)
            self._error = None
            self._render()
            self._update_sight()

    def new_chat(self) -> None:
        if self.job is not None:
            return
        self.conv = self.ctx.chats.new(self.system.toPlainText())
        self.transcript.close_blocks()
        self.history.clearSelection()
        self._error = None
        self._render()
        self._update_sight()
        self.input.setFocus()

    def _render(self, keep_scroll: bool = False) -> None:
        """The whole transcript: the saved messages, then the reply being made, or why
        the last turn got none."""
        self.transcript.show_messages(
            self.conv.messages,
            self.live if self.job is not None else None,
            keep_scroll=keep_scroll,
            error=self._error if self.job is None else None,
        )

    # --------------------------------------------------------------- pictures
    def attach_dialog(self) -> None:
        """Attach image…: choose picture files."""
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach images", "", FILE_FILTER)
        if paths:
            self.tray.attach_files(paths)

    def _update_sight(self) -> None:
        """Say, beside the pictures, when the loaded model cannot see them."""
        info = self.models.current
        pictures = bool(self.tray.pictures) or has_pictures(self.conv.messages)
        if info is None or not pictures or "vision" in info.modalities:
            self.tray.show_blind(None)
            return
        self.tray.show_blind(
            f"{info.name} cannot see images: it was loaded without a projector (mmproj), so a message with "
            "pictures would be refused. Load it with its projector to send them."
        )

    # -------------------------------------------------------------------- act
    def send(self) -> None:
        text = self.input.toPlainText().strip()
        if (not text and not self.tray.pictures) or self.job is not None:
            return
        if not self._take_schema():
            return
        self.input.clear()
        message: dict = {"role": "user", "content": text}
        pictures = self.tray.take()
        if pictures:
            message["images"] = [saved(p) for p in pictures]
        self.conv.messages.append(message)
        self.ctx.chats.save(self.conv)
        self._update_sight()  # the conversation now holds them
        self._start()

    def _take_schema(self) -> bool:
        """Read the attached schema for the next reply; False (said in the hint) if it is not JSON."""
        try:
            self._grammar = self.controls.schema()
        except ValueError as e:
            self.hint.setText(str(e))
            return False
        self.hint.setText("")
        return True

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
        self._error = None
        try:
            messages = self.conv.chat_messages()
        except ValueError as e:  # a kept picture is damaged: said under the turn, nothing sent
            self._error = user_text(e)
            self._render()
            return
        self.live = LiveReply()
        self.transcript.new_live()
        c = self.controls
        job = J.Generate(
            messages=messages,
            grammar=self._grammar,
            chat_template_kwargs=c.template_kwargs(),
            defaults=self._preferences(),
        )
        self.conv.sampling = c.chat_sampling()
        self.job = self.ctx.bridge.run(job)
        self._render()
        self.job.parts.connect(self._on_parts)
        self.job.tokens.connect(self._on_tokens)
        self.job.rounds.connect(self._on_rounds)
        self.job.finished.connect(self._on_finished)
        self.job.failed.connect(self._on_failed)
        self._set_busy(True)
        self.generationStarted.emit(self.job.id)

    def _preferences(self) -> J.Defaults:
        """The page's settings and controls as the reply's layer of defaults: the engine
        fills what they leave unset (0 in the settings) from its own layer, then the
        built-in one (engine.runtime.decider.resolve), and checks every value the same way
        whatever layer it came from. The reply's own values are only what this reply asks
        (its grammar, the Think box)."""
        s, c = self.ctx.settings.chat, self.controls
        return J.Defaults(
            max_tokens=s.max_tokens or None,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            sampled_draft=s.sampled_draft,
            suffix_drafts=s.suffix_drafts,
            draft_depth=c.draft_depth(),
            mtp=c.mtp(),
            thinking_budget=s.thinking_budget or None,
        )

    def _set_busy(self, busy: bool) -> None:
        self.send_btn.setEnabled(not busy)
        self.regen_btn.setEnabled(not busy)
        self.stop_btn.setEnabled(busy)
        self.new_btn.setEnabled(not busy)
        self.history.setEnabled(not busy)
        self.hint.setText(
            "generating… (Esc to stop)" if busy else "Ctrl+Enter send · Esc stop · Ctrl+N new chat · Ctrl+R regenerate"
        )

    # ----------------------------------------------------------------- events
    def _on_parts(self, parts: list[Part]) -> None:
        self.live.add_parts(parts)

    def _on_tokens(self, text: str, n: int) -> None:
        self.live.add_text(text, n)
        self.transcript.live_changed()

    def _on_rounds(self, rounds: list) -> None:
        self.live.add_rounds(rounds)
        stats = self.live.stats
        mtp = self.models.current.mtp if self.models.current else ""
        self.figures.setText(figures_line(stats if stats.drafted else None, self.live.rate, mtp))

    def _on_finished(self, result: object, cancelled: bool) -> None:
        self.job = None
        self.transcript.stop_live()
        self._set_busy(False)
        if isinstance(result, J.GenerateResult):
            self.live.end(result.reply, result.text, result.stats.thinking_tokens)
            mtp = self.models.current.mtp if self.models.current else ""
            self.figures.setText(figures_line(result.stats, mtp=mtp) + ("  ·  stopped" if cancelled else ""))
            stats = {
                "tokens": len(result.tokens),
                "tokens_per_second": result.stats.tokens_per_second,
                "acceptance": result.stats.acceptance,
                "stopped": cancelled,
            }
        else:
            stats = {"stopped": True}
        self.conv.messages.append(self.live.saved(stats))
        self.ctx.chats.save(self.conv)
        self._render()
        self._load_history()
        if self.ctx.messages is not None and cancelled:
            self.ctx.messages.status("Stopped.")

    def _on_failed(self, error: object) -> None:
        self.job = None
        self._set_busy(False)
        self._error = user_text(error) if isinstance(error, BaseException) else str(error)
        self._render()
        self._load_history()  # the turn was kept
        if self.ctx.messages is not None:
            self.ctx.messages.error("Generation failed", error)  # type: ignore[arg-type]

    # --------------------------------------------------------------- settings
    def _on_sampling(self) -> None:
        self.conv.sampling = self.controls.chat_sampling()

    def _on_system(self) -> None:
        self.ctx.settings.chat.system_prompt = self.system.toPlainText()

    def _on_code_copied(self) -> None:
        if self.ctx.messages is not None:
            self.ctx.messages.status("Code copied to the clipboard.")

    def _on_model_loaded(self, info: ModelInfo) -> None:
        self.controls.show_model(info)
        self.controls.refresh_models(info.path)
        quant = f" {info.quantization}" if info.quantization else ""
        self.figures.setText(f"ready: {info.name}{quant} · MTP {info.mtp} · {context_line(info)}")
        self.figures.setToolTip(f"Chat template: {info.chat_template}")
        self._update_sight()
