"""Chat and Performance pages through their real widgets on a real engine."""

from __future__ import annotations

import pytest

from PySide6.QtCore import Qt

from engine.synth.demo import SENTENCE
from tests.app.conftest import load, wait_idle


def test_two_turn_conversation_on_the_constructed_demo(qtbot, window, fixtures):
    load(qtbot, window, fixtures["constructed-demo"].path)
    chat = window.pages["chat"]
    for i, text in enumerate(["Hello!", "And then?"]):
        chat.input.setPlainText(text)
        qtbot.mouseClick(chat.send_btn, Qt.MouseButton.LeftButton)
        assert chat.job is not None and not chat.send_btn.isEnabled() and chat.stop_btn.isEnabled()
        wait_idle(qtbot, chat)
        assert [m["role"] for m in chat.conv.messages] == ["user", "assistant"] * (i + 1)
        assert chat.conv.messages[-1]["content"] == "".join(SENTENCE)
    assert "".join(SENTENCE) in chat.transcript.toPlainText()
    assert "acceptance" in chat.figures.text() and "tok/s" in chat.figures.text()
    assert chat.history.count() == 1 and chat.history.item(0).text() == "Hello!"


def test_stop_mid_stream_then_continue(qtbot, window, fixtures):
    load(qtbot, window, fixtures["partial"].path, "integrated")
    window.ctx.settings.chat.max_tokens = 3000  # the partial model never ends on its own
    chat = window.pages["chat"]
    chat.input.setPlainText("Tell me everything")
    chat.send()
    qtbot.waitUntil(lambda: chat.live.tokens > 20, timeout=20000)
    qtbot.keyClick(chat.input, Qt.Key.Key_Escape)
    wait_idle(qtbot, chat)
    last = chat.conv.messages[-1]
    assert last["role"] == "assistant" and last["stats"]["stopped"] is True
    assert 0 < last["stats"]["tokens"] < 3000 and "stopped" in chat.figures.text()
    window.ctx.settings.chat.max_tokens = 16
    chat.input.setPlainText("Short answer please")
    chat.send()
    wait_idle(qtbot, chat)
    assert chat.conv.messages[-1]["stats"]["tokens"] == 16 and not chat.conv.messages[-1]["stats"]["stopped"]


def test_graphs_follow_the_engine_stats(qtbot, window, fixtures):
    load(qtbot, window, fixtures["partial"].path, "integrated")
    window.ctx.settings.chat.max_tokens = 200
    chat, perf = window.pages["chat"], window.pages["performance"]
    chat.depth.setCurrentText("3")
    results = []
    chat.input.setPlainText("Graph me")
    chat.send()
    chat.job.finished.connect(lambda res, _cancelled: results.append(res))
    wait_idle(qtbot, chat)
    window.show_page("performance")
    stats = results[-1].stats
    perf._redraw()
    assert perf.stats.accept_len_hist == stats.accept_len_hist and perf.stats.drafted == stats.drafted > 0
    assert perf.pos_chart.values() == stats.acceptance_by_position and len(perf.pos_chart.values()) == 3
    assert perf.len_chart.values() == [float(x) for x in stats.accept_len_hist]
    pts = perf.tps_chart.points()
    assert len(pts) > 10 and all(b[0] >= a[0] for a, b in zip(pts, pts[1:])) and all(y > 0 for _, y in pts[:-1])
    assert pts[-1][1] == 0.0  # all requests together: nothing decodes once it ended
    assert all(0.0 <= y <= 1.0 for _, y in perf.acc_chart.points())
    assert perf.speeds.get("MTP on") == stats.tokens_per_second
    # a plain reply (no head, no conversation drafts) gives the MTP-off baseline bar
    chat.suffix_drafts.setChecked(False)
    assert window.ctx.settings.chat.suffix_drafts is False
    chat.source.setCurrentIndex(chat.source.findData("off"))
    chat.input.setPlainText("Again without MTP")
    chat.send()
    chat.job.finished.connect(lambda res, _cancelled: results.append(res))
    wait_idle(qtbot, chat)
    perf._redraw()
    assert perf.onoff_chart.labels() == ["MTP off", "MTP on"] and results[-1].stats.drafted == 0
    assert "MTP speedup" in perf.summary.text()


def test_depth_and_source_controls_change_the_figures(qtbot, window, fixtures):
    load(qtbot, window, fixtures["full"].path, "integrated")
    window.ctx.settings.chat.max_tokens = 40
    chat = window.pages["chat"]
    chat.depth.setCurrentText("1")
    chat.input.setPlainText("one")
    chat.send()
    wait_idle(qtbot, chat)
    assert "depth 1" in chat.figures.text() and "acceptance 1.00" in chat.figures.text()
    chat.depth.setCurrentText("4")
    chat.input.setPlainText("two")
    chat.send()
    wait_idle(qtbot, chat)
    assert "depth 4" in chat.figures.text()
    # the source is a load-time choice: switching to external without a head reloads with auto
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        chat.source.setCurrentIndex(chat.source.findData("integrated"))
        window.models.reload("integrated")
    assert window.models.current.mtp == "integrated"
    assert window.ctx.settings.mtp.depth == "4"


def test_bench_from_the_performance_page(qtbot, window, fixtures):
    load(qtbot, window, fixtures["full"].path, "integrated")
    perf = window.pages["performance"]
    window.show_page("performance")
    perf.bench_tokens.setValue(16)
    perf.bench_runs.setValue(1)
    qtbot.mouseClick(perf.bench_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: perf.bench_job is None, timeout=60000)
    assert "identical outputs in every arm" in perf.bench_result.text()
    assert [a.depth for a in perf.last_bench.arms] == ["0", "1", "2", "3", "auto"]
    perf._redraw()
    assert perf.onoff_chart.labels()[0] == "MTP off" and len(perf.onoff_chart.values()) == 2


def test_chat_page_on_a_real_quantized_model(qtbot, window, gemma, monkeypatch):
    """Gemma 3 270M Q4_K_M through the real widgets: the page says which chat template
    is in use, the reply streams in with no template markup, and a crash the load probe
    had to work around is told to the user (forced at the probe's seam)."""
    from engine.runtime.load.loadcheck import CRASH_ENV

    from engine.runtime.llama.repack import OVERRIDE_ENV

    monkeypatch.setenv(OVERRIDE_ENV, "on")  # a machine whose repacked kernels run, but not for this model
    monkeypatch.setenv(CRASH_ENV, "extra-bufts")
    info = load(qtbot, window, gemma)
    chat = window.pages["chat"]
    assert info.quantization == "Q4_K_M" and info.extra_bufts is False
    assert "Chat template: llama.cpp built-in 'gemma'" in chat.template_line.text()
    assert "Q4_K_M" in chat.figures.text()
    # said in the window's load line, not in a dialog: the load went on safely
    assert not window.ctx.messages.open_dialogs
    said = window.statusBar().currentMessage()
    assert "with a fallback: " in said and "SIGSEGV" in said and "repacking" in said
    window.ctx.settings.chat.max_tokens = 24
    chat.input.setPlainText("Write one sentence about the sea.")
    chat.send()
    wait_idle(qtbot, chat, timeout=60000)
    reply = chat.conv.messages[-1]["content"]
    assert reply.strip()
    for marker in ("<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>"):
        assert marker not in reply and marker not in chat.transcript.toPlainText()
    shown = len(window.ctx.messages.open_dialogs)
    load(qtbot, window, gemma)  # the same file again: the fallback is remembered, and said in the status bar only
    assert len(window.ctx.messages.open_dialogs) == shown
    again = window.models.current
    assert again.fallbacks == info.fallbacks and not again.fallbacks_found_now
    assert "with a fallback found earlier: " in window.statusBar().currentMessage()


def test_chat_samples_with_mtp_and_keeps_sampling_per_chat(qtbot, window, fixtures):
    load(qtbot, window, fixtures["partial"].path, "integrated")
    chat = window.pages["chat"]
    window.ctx.settings.chat.max_tokens = 24
    chat.temperature.setValue(0.7)
    chat.top_k.setValue(40)
    assert chat.sampled_draft.isEnabled()
    chat.input.setPlainText("Sample me")
    chat.send()
    wait_idle(qtbot, chat)
    stats = chat.conv.messages[-1]["stats"]
    assert "sampled" in chat.figures.text() and "acceptance" in chat.figures.text()
    assert chat.conv.sampling == {"temperature": 0.7, "top_p": 1.0, "top_k": 40, "sampled_draft": False}
    assert window.ctx.settings.chat.temperature == 0.7 and stats["tokens"] > 0
    first = chat.conv.id
    qtbot.keyClick(chat.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)  # a new chat, other settings
    chat.temperature.setValue(0.0)
    chat.input.setPlainText("Greedy now")
    chat.send()
    wait_idle(qtbot, chat)
    assert "sampled" not in chat.figures.text() and not chat.sampled_draft.isEnabled()
    row = next(i for i in range(chat.history.count()) if chat.history.item(i).data(Qt.ItemDataRole.UserRole) == first)
    chat.history.setCurrentRow(row)  # back to the first chat: its sampling comes back
    assert chat.temperature.value() == 0.7 and chat.top_k.value() == 40


def test_a_chat_with_a_json_schema_gets_json(qtbot, window):
    import json

    from engine.synth.demo import demo_model_path

    load(qtbot, window, demo_model_path(), "integrated")
    window.ctx.settings.chat.max_tokens = 80
    chat = window.pages["chat"]
    chat.schema_box.setChecked(True)
    assert chat.schema_edit.isVisibleTo(chat)
    chat.schema_edit.setPlainText("{not json")
    chat.input.setPlainText("A pet, please.")
    chat.send()
    assert chat.job is None and "not valid JSON" in chat.hint.text()  # refused with words, nothing sent
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0, "maximum": 20}},
        "required": ["kind", "age"],
        "additionalProperties": False,
    }
    chat.schema_edit.setPlainText(json.dumps(schema))
    chat.send()
    wait_idle(qtbot, chat)
    reply = json.loads(chat.conv.messages[-1]["content"])
    assert reply["kind"] in ("cat", "dog") and 0 <= reply["age"] <= 20
    assert "forced (free)" in chat.figures.text()


@pytest.mark.parametrize("counts", [[31, 37], [3, 7], [0, 101], [12], [9, 2], [0]])
def test_round_count_chart_ticks_are_whole_numbers(qtbot, counts):
    """The accepted-drafts chart counts rounds: every tick is a whole number, and there are
    at most 6 of them (11 ticks on a short chart were all elided to "...")."""
    from app.widgets.charts import BarChart

    chart = BarChart("Accepted drafts per round", "rounds", integer=True)
    qtbot.addWidget(chart)
    chart.set_bars([str(i) for i in range(len(counts))], counts)
    top, n = chart.y.max(), chart.y.tickCount()
    step = top / (n - 1)
    assert top >= max(counts) and step == int(step) and step >= 1 and n <= 6


def test_the_performance_page_follows_several_requests_each_and_together(qtbot, window, fixtures):
    """Two requests decoding together: the page lists both, its charts show them together
    (the second adds to what the first drew, it does not restart the charts), and either
    one on its own."""
    from engine.runtime import jobs as J

    load(qtbot, window, fixtures["partial"].path, "integrated")
    eng = window.ctx.bridge.engine
    perf = window.pages["performance"]
    window.show_page("performance")
    first = eng.submit(J.Generate(prompt="one", max_tokens=3500, ignore_eog=True))
    qtbot.waitUntil(lambda: perf.tracks.view().emitted > 100, timeout=30000)
    perf._redraw()
    drawn = perf.tps_chart.points()[:5]
    assert len(drawn) == 5
    second = eng.submit(J.Generate(prompt="two", max_tokens=3500, ignore_eog=True))
    qtbot.waitUntil(lambda: perf.tracks.view().running == 2 and perf.tracks.view(second.id).emitted > 50, timeout=30000)
    perf._redraw()
    assert perf.tps_chart.points()[:5] == drawn  # added to, not restarted
    listed = [perf.showing.itemText(i) for i in range(perf.showing.count())]
    assert listed[0] == "All requests" and sum(t.endswith("(running)") for t in listed) == 2
    perf.showing.setCurrentIndex(perf.showing.findData(second.id))
    perf._redraw()
    own, together = perf.view(), perf.tracks.view()
    assert own.running == 1 and 0 < own.emitted < together.emitted
    assert perf.tps_chart.points() == own.tps
    for h in (first, second):
        h.cancel()
    qtbot.waitUntil(lambda: perf.tracks.view().running == 0, timeout=30000)
    assert perf.showing.currentData() == second.id  # the choice stays while the list changes
