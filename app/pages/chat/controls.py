"""The chat page's controls above the transcript: the chat template line, the MTP source
and draft depth, sampling (temperature, top-p, top-k, sampled drafts), the Think box
and an attached JSON schema.

They are the app's settings (each change is written to them) and a reply's options
(the page asks them when it starts a reply); the sampling and Think box are also the
chat's own, which the page keeps with it. GUI thread.

Signals:
    samplingChanged()     a sampling control or the Think box changed
    sourceChanged(str)    the MTP source setting changed to one the model is reloaded
                          with ("auto", "integrated", "external"; "off" is per request)
"""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from engine.facade import DraftDepth, GrammarSpec, ModelInfo, Mtp

DEPTHS = ["auto", "1", "2", "3", "4", "5", "6", "8"]
SOURCES = [("Auto", "auto"), ("Integrated", "integrated"), ("External head", "external"), ("Off", "off")]


class ChatControls(QWidget):
    samplingChanged = Signal()
    sourceChanged = Signal(str)
    #: the user picked a library model (its id) that is not the loaded one: load it
    modelChosen = Signal(str)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self._build()
        s = ctx.settings
        self.source.setCurrentIndex(max(0, self.source.findData(s.mtp.source)))
        self.depth.setCurrentText(s.mtp.depth if s.mtp.depth in DEPTHS else "auto")
        self.show_sampling({})
        self.suffix_drafts.setChecked(_chosen(s.chat.suffix_drafts, ctx.bridge.request_defaults().suffix_drafts))
        self._connect()

    def _build(self) -> None:
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        self.template_line = QLabel("")
        self.template_line.setObjectName("Hint")
        top.addWidget(self.template_line)
        top.addStretch(1)
        top.addWidget(QLabel("Model"))
        self.model_pick = QComboBox()
        self.model_pick.setMinimumContentsLength(16)
        self.model_pick.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_pick.setToolTip("The library's models: the one you pick is loaded")
        self.model_pick.activated.connect(self._on_model_picked)
        top.addWidget(self.model_pick)
        top.addWidget(QLabel("MTP source"))
        self.source = QComboBox()
        for label, value in SOURCES:
            self.source.addItem(label, value)
        top.addWidget(self.source)
        top.addWidget(QLabel("Draft depth"))
        self.depth = QComboBox()
        self.depth.addItems(DEPTHS)
        top.addWidget(self.depth)
        lay.addLayout(top)

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
        self.suffix_drafts = QCheckBox("Conversation drafts")
        self.suffix_drafts.setToolTip(
            "Also draft from the conversation itself: what followed the newest words where they were written "
            "before (edits, quotes, repeats), each round only when it should pay; the reply is the same"
        )
        samp.addWidget(self.suffix_drafts)
        self.think_box = QCheckBox("Think")
        self.think_box.setChecked(True)
        self.think_box.setEnabled(False)
        self.think_box.setToolTip("Load a model whose chat template can turn thinking on and off")
        samp.addWidget(self.think_box)
        self.schema_box = QCheckBox("JSON schema")
        self.schema_box.setToolTip(
            "Replies follow a JSON schema (structured output); tokens the schema forces cost nothing"
        )
        samp.addWidget(self.schema_box)
        lay.addLayout(samp)
        self.schema_edit = QPlainTextEdit()
        self.schema_edit.setPlaceholderText('Paste a JSON schema, e.g. {"type": "object", "properties": {...}}')
        self.schema_edit.setFixedHeight(70)
        self.schema_edit.setVisible(False)
        lay.addWidget(self.schema_edit)

    def refresh_models(self, loaded_path: str | None) -> None:
        """List the library's chat models, the loaded one (by its file) selected; a model
        loaded from outside the library is listed first, as it is."""
        from engine.facade import EntryKind

        lib = self.ctx.library
        self.model_pick.blockSignals(True)
        self.model_pick.clear()
        current = -1
        try:
            entries = [e for e in lib.entries() if e.kind != EntryKind.HEAD]
        except Exception:  # an unreadable library lists nothing here (the Models page says why)
            entries = []
        for e in entries:
            if str(e.path(lib.root)) == loaded_path:
                current = self.model_pick.count()
            self.model_pick.addItem(e.name, e.id)
        if current < 0 and loaded_path:
            self.model_pick.insertItem(0, Path(loaded_path).name.removesuffix(".gguf"), "")
            current = 0
        self.model_pick.setCurrentIndex(current)
        self.model_pick.blockSignals(False)

    def _on_model_picked(self, index: int) -> None:
        eid = self.model_pick.itemData(index)
        if eid:
            self.modelChosen.emit(eid)

    def _connect(self) -> None:
        self.depth.currentTextChanged.connect(self._on_depth)
        for w in (self.temperature, self.top_p):
            w.valueChanged.connect(self._on_sampling)
        self.top_k.valueChanged.connect(self._on_sampling)
        self.sampled_draft.toggled.connect(self._on_sampling)
        self.suffix_drafts.toggled.connect(self._on_drafts)
        self.think_box.toggled.connect(self._on_sampling)
        self.schema_box.toggled.connect(self.schema_edit.setVisible)
        self.source.currentIndexChanged.connect(self._on_source)

    # --------------------------------------------------------------- sampling
    def _on_drafts(self, on: bool) -> None:
        """Conversation drafts are a preference of the app's, not of one chat."""
        self.ctx.settings.chat.suffix_drafts = _own(bool(on), self.ctx.bridge.request_defaults().suffix_drafts)

    def show_sampling(self, values: dict) -> None:
        """Show a chat's sampling settings: its own, else the preferences, else the engine's."""
        c, engine = self.ctx.settings.chat, self.ctx.bridge.request_defaults()

        def pick(key: str):
            own = values.get(key)
            return own if own is not None else _chosen(getattr(c, key), getattr(engine, key))

        controls = (self.temperature, self.top_p, self.top_k, self.sampled_draft, self.think_box)
        for w in controls:
            w.blockSignals(True)
        self.temperature.setValue(float(pick("temperature")))
        self.top_p.setValue(float(pick("top_p")))
        self.top_k.setValue(int(pick("top_k")))
        self.sampled_draft.setChecked(bool(pick("sampled_draft")))
        self.think_box.setChecked(values.get("think", True) is not False)
        for w in controls:
            w.blockSignals(False)
        self._on_sampling()

    def _on_sampling(self, *_args) -> None:
        """The controls are the chat's sampling settings, saved with it, and the preferences:
        a preference is kept only where it differs from the engine's value (left as the
        engine has it, it stays unset and follows the engine)."""
        c, engine = self.ctx.settings.chat, self.ctx.bridge.request_defaults()
        c.temperature = _own(round(self.temperature.value(), 4), engine.temperature)
        c.top_p = _own(round(self.top_p.value(), 4), engine.top_p)
        c.top_k = _own(int(self.top_k.value()), engine.top_k)
        c.sampled_draft = _own(self.sampled_draft.isChecked(), engine.sampled_draft)
        self.sampled_draft.setEnabled(self.temperature.value() > 0)
        self.samplingChanged.emit()

    def chat_sampling(self) -> dict:
        """The chat's own settings as the controls show them (kept with the chat, so it
        samples the same way when opened again): sampling, and ``think: False`` when
        thinking is off."""
        out: dict = {
            "temperature": round(self.temperature.value(), 4),
            "top_p": round(self.top_p.value(), 4),
            "top_k": int(self.top_k.value()),
            "sampled_draft": self.sampled_draft.isChecked(),
        }
        if not self.think_box.isChecked():
            out["think"] = False
        return out

    # ------------------------------------------------------------------ model
    def show_model(self, info: ModelInfo) -> None:
        """A model was loaded: its chat template, and whether it thinks."""
        self.show_think(info)
        self.template_line.setText(f"Chat template: {info.chat_template}")
        self.template_line.setToolTip(f"Speculation: {info.identity}")

    def show_think(self, info: ModelInfo | None) -> None:
        """The Think box works when the model's template takes ``enable_thinking``."""
        toggle = bool(info and info.think_toggle)
        self.think_box.setEnabled(toggle)
        if toggle:
            tip = "Let the model think before it answers (the thinking shows above the answer, folded)"
        elif info and info.thinks:
            tip = "This model always thinks: its chat template has no switch for it"
        else:
            tip = "This model does not think (its chat template writes no <think> blocks)"
        self.think_box.setToolTip(tip)

    # ------------------------------------------------------- a reply's options
    def draft_depth(self) -> DraftDepth:
        return DraftDepth.parse(self.depth.currentText())

    def mtp(self) -> Mtp:
        return Mtp.OFF if self.source.currentData() == "off" else Mtp.ON

    def template_kwargs(self) -> dict | None:
        """Thinking off for this reply when the Think box is unticked (and can be)."""
        if self.think_box.isEnabled() and not self.think_box.isChecked():
            return {"enable_thinking": False}
        return None

    def schema(self) -> GrammarSpec | None:
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

    # --------------------------------------------------------------- settings
    def _on_depth(self, text: str) -> None:
        self.ctx.settings.mtp.depth = text

    def _on_source(self, _index: int) -> None:
        value = self.source.currentData()
        if value == self.ctx.settings.mtp.source:
            return
        self.ctx.settings.mtp.source = value
        if value != "off":  # "off" is per request: the loaded MTP context stays ready
            self.sourceChanged.emit(value)


def _chosen(preference, engine):
    """A preference where the user set one, else the engine's value."""
    return engine if preference is None else preference


def _own(value, engine):
    """What to keep as a preference: ``value``, or None (unset) where it is the engine's."""
    return None if value == engine else value
