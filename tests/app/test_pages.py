"""Models, Compose, Backend and Server pages, settings that survive a restart, and the
bridge keeping the event loop free."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.hub.remote import HubConfig, list_gguf
from engine.runtime import jobs as J
from tests.app.conftest import load, wait_idle
from tests.engine.hub.fakehub import FakeHub, FakeHubServer, Fault


# ------------------------------------------------------------------- compose
def test_compose_two_fixture_files_from_the_page(qtbot, window, fixtures, tmp_path):
    from dataclasses import replace

    from engine.synth.qwen35 import build_model
    from tests.models import RECIPES

    build_model(replace(RECIPES["partial"], n_merges=150), tmp_path / "o.gguf", head_path=tmp_path / "mtp-o.gguf")
    page = window.pages["compose"]
    window.show_page("compose")
    page.target.set_path(str(fixtures["partial"].trunk))
    assert not page.compose_btn.isEnabled()
    page.head.set_path(str(tmp_path / "mtp-o.gguf"))  # another model's head: refused, in plain words
    assert page.check.text() == "Checking the pair…"  # off the GUI thread
    qtbot.waitUntil(lambda: "Not compatible" in page.check.text(), timeout=10000)
    assert "Not compatible: The head's vocabulary differs" in page.check.text() and not page.compose_btn.isEnabled()
    assert page.compose() is None  # an unchecked or refused pair cannot be composed
    page.head.set_path(str(fixtures["partial"].head))
    qtbot.waitUntil(page.compose_btn.isEnabled, timeout=10000)
    assert "Compatible: qwen35, 4 trunk blocks + 1 NextN block(s)" in page.check.text()
    qtbot.mouseClick(page.compose_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.task is None, timeout=30000)
    assert "Validation: passed" in page.report.toPlainText()
    entry = page.result
    assert entry.mtp == "composite" and entry.kind == "composite"
    assert entry.path(window.ctx.library.root).read_bytes() == fixtures["partial"].path.read_bytes()
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        qtbot.mouseClick(page.load_btn, Qt.MouseButton.LeftButton)
    assert window.models.current.mtp == "integrated"


def test_compose_cancel_writes_nothing(qtbot, window, fixtures, monkeypatch):
    import threading

    import engine.hub.composing as compose_mod

    real, started, release = compose_mod.compose, threading.Event(), threading.Event()

    def held(*a, **kw):  # the work starts only after the cancel has landed
        started.set()
        release.wait(30)
        return real(*a, **kw)

    monkeypatch.setattr(compose_mod, "compose", held)
    page = window.pages["compose"]
    page.target.set_path(str(fixtures["random"].trunk))
    page.head.set_path(str(fixtures["random"].head))
    qtbot.waitUntil(page.compose_btn.isEnabled, timeout=10000)
    task = page.compose()
    assert started.wait(30)
    qtbot.mouseClick(page.cancel_btn, Qt.MouseButton.LeftButton)
    assert task.cancel_event.is_set()
    release.set()
    qtbot.waitUntil(lambda: page.task is None, timeout=30000)
    assert "Cancelled" in page.report.toPlainText() and "Composed" not in page.report.toPlainText()
    assert window.ctx.library.entries() == []
    assert not any((window.ctx.library.root / ".composing").glob("*.gguf*"))


# -------------------------------------------------------------------- models
def test_models_page_search_pull_with_progress_pause_resume(qtbot, window, fixtures, monkeypatch):
    hub = FakeHub()
    hub.add_repo(
        "acme/Tiny-GGUF",
        {"tiny-Q8_0.gguf": fixtures["partial"].trunk, "mtp-tiny.gguf": fixtures["partial"].head},
        downloads=5,
    )
    hub.faults["tiny-Q8_0.gguf"] = Fault(slow=0.03, times=10**6)
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        page = window.pages["models"]
        window.show_page("models")
        page.query.setText("tiny")
        qtbot.mouseClick(page.search_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(
            lambda: page.repos.count() == 1 and page.repos.item(0).data(Qt.ItemDataRole.UserRole) is not None,
            timeout=10000,
        )
        page.repos.setCurrentRow(0)
        qtbot.waitUntil(lambda: page.files.count() == 2, timeout=10000)
        assert "MTP head" in page.files.item(1).text()
        page.files.setCurrentRow(0)
        qtbot.waitUntil(lambda: "qwen35" in page.file_info.text(), timeout=10000)
        assert page.pull_head_btn.isEnabled()
        qtbot.mouseClick(page.pull_head_btn, Qt.MouseButton.LeftButton)
        row = page.rows[-1]
        qtbot.waitUntil(lambda: row.bar.value() > 300, timeout=20000)  # a few 256 KiB chunks on disk
        assert "/s" in row.info.text()
        qtbot.mouseClick(row.pause_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: row.state == "paused", timeout=10000)
        paused_at = row.bar.value()
        assert row.pause_btn.text() == "Resume" and window.ctx.library.entries() == []
        del hub.faults["tiny-Q8_0.gguf"]
        with qtbot.waitSignal(row.finished, timeout=30000):
            qtbot.mouseClick(row.pause_btn, Qt.MouseButton.LeftButton)
        resumed = [g for g in hub.gets("tiny-Q8_0.gguf") if g.range and not g.range.startswith("bytes=0-")]
        assert resumed and paused_at > 0
    entries = window.ctx.library.entries()
    assert {e.kind for e in entries} == {"model", "head"}
    assert page.table.rowCount() == 2 and not page.empty.isVisible()
    page.table.selectRow([i for i in range(2) if page.table.item(i, 2).text() == "none"][0])
    # the library shows the file's own quantization label (general.file_type of the fixture: F32)
    assert {page.table.item(i, 1).text() for i in range(2)} <= {"F32", "F16", "Q8_0"}
    assert "qwen35" in page.details.toHtml() and page.load_btn.isEnabled()
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        qtbot.mouseClick(page.load_btn, Qt.MouseButton.LeftButton)
    assert window.models.current.mtp == "external"  # the paired head is used
    page.delete_selected(confirm=False)
    assert len(window.ctx.library.entries()) == 1


def test_models_page_import_and_cancel_download(qtbot, window, fixtures, monkeypatch):
    page = window.pages["models"]
    task = page.import_file(fixtures["eos"].path)
    qtbot.waitUntil(lambda: not task.running and page.table.rowCount() == 1, timeout=10000)
    hub = FakeHub()
    hub.add_repo("acme/Slow-GGUF", {"slow-Q8_0.gguf": fixtures["random"].path})
    hub.faults["slow-Q8_0.gguf"] = Fault(slow=0.05, times=10**6)
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        rev, groups = list_gguf(HubConfig.from_env(), "acme/Slow-GGUF")
        page.hub.show_files("acme/Slow-GGUF", rev, groups)
        page.files.setCurrentRow(0)
        row = page.pull(with_head=False)
        qtbot.waitUntil(lambda: row.bar.value() > 0, timeout=10000)
        qtbot.mouseClick(row.cancel_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: row.state == "cancelled", timeout=10000)
    assert "removed" in row.info.text()
    assert not list(window.ctx.library.partial_dir.rglob("*.part"))
    assert len(window.ctx.library.entries()) == 1


# -------------------------------------------------------------- server/backend
def test_backend_page_offers_the_exact_build(qtbot, window):
    page = window.pages["backend"]
    window.show_page("backend")  # detection runs when the page is first shown
    qtbot.waitUntil(lambda: page.plan is not None, timeout=20000)
    exact = page.plan_for(exact=True)
    assert exact.backend == "cpu" and "-DGGML_LLAMAFILE=OFF" in exact.cmake_args
    assert "-DGGML_RPC=ON" in exact.cmake_args and "-DGGML_RPC=ON" in page.plan.cmake_args  # builds here can pool
    assert page.plan_for(exact=False) is page.plan and "LLAMAFILE" not in page.plan.cmake_args
    assert page.exact_build_btn.isEnabled() and "bit-identically" in page.exact_build_btn.toolTip()


def test_backend_page_shows_what_is_in_use(qtbot, window):
    page = window.pages["backend"]
    window.show_page("backend")
    qtbot.waitUntil(lambda: page.plan is not None, timeout=20000)
    assert "OS" in page.hardware.toPlainText() and "In use" in page.plan_view.toPlainText()
    assert page.table.item(0, 0).text() == "installed" and page.table.item(0, 3).text() == "yes"
    assert page.build_btn.text().startswith("Build CPU")


def test_repacking_off_is_said_in_the_status_bar_and_on_the_backend_page_not_in_a_dialog(
    qtbot, window, fixtures, monkeypatch
):
    """Where repacking is off for the machine (here the user's override; on a CPU whose
    repacked kernels crash, the probe's verdict), every load follows it without a word
    of its own: one label in the status bar, one line on the Backend page."""
    from engine.runtime.llama.repack import OVERRIDE_ENV

    monkeypatch.setenv(OVERRIDE_ENV, "off")
    assert not window.repack_label.isVisible()
    info = load(qtbot, window, fixtures["partial"].path, "integrated")
    assert info.extra_bufts is False and info.fallbacks == ()
    assert window.repack_label.isVisible() and "off on this CPU" in window.repack_label.toolTip()
    assert not window.ctx.messages.open_dialogs
    page = window.pages["backend"]
    window.show_page("backend")
    qtbot.waitUntil(lambda: page.plan is not None, timeout=20000)
    assert f"CPU weight repacking: off on this CPU. {OVERRIDE_ENV}=off turns it off" in page.plan_view.toPlainText()
    monkeypatch.delenv(OVERRIDE_ENV)
    load(qtbot, window, fixtures["full"].path, "integrated")
    assert window.repack_label.isVisible() is (not window.models.current.extra_bufts)


# ---------------------------------------------------------- settings/restart
def test_settings_and_history_survive_a_restart(qtbot, settings_path, tmp_path, monkeypatch, fixtures):
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    from app.main import build_app

    _, win, ctx = build_app(settings_path=settings_path)
    qtbot.addWidget(win)
    load(qtbot, win, fixtures["eos"].path, "integrated")
    chat = win.pages["chat"]
    chat.depth.setCurrentText("2")
    chat.system.setPlainText("Be terse.")
    chat.input.setPlainText("remember me")
    chat.send()
    wait_idle(qtbot, chat)
    win.resize(900, 700)
    win.show_page("performance")
    win.close()
    ctx.bridge.engine.stop()

    _, win2, ctx2 = build_app(settings_path=settings_path)
    qtbot.addWidget(win2)
    chat2 = win2.pages["chat"]
    assert chat2.depth.currentText() == "2" and chat2.system.toPlainText() == "Be terse."
    assert win2.current_page == "performance" and ctx2.settings.last_model == str(fixtures["eos"].path)
    assert chat2.history.count() == 1 and chat2.history.item(0).text() == "remember me"
    chat2.history.setCurrentRow(0)
    assert "remember me" in chat2.transcript.toPlainText()
    win2.close()
    ctx2.bridge.engine.stop()


def test_migrates_old_settings(tmp_path):
    import json

    from engine import settings as S

    p = tmp_path / "s.json"
    p.write_text(
        json.dumps({"schema_version": 1, "draft_depth": 3, "mtp_source": "external", "server_port": 9000, "junk": 1})
    )
    s = S.load(p)
    assert (s.mtp.depth, s.mtp.source, s.server.port, s.schema_version) == ("3", "external", 9000, S.SCHEMA_VERSION)
    p.write_text("{broken")
    assert S.load(p).schema_version == S.SCHEMA_VERSION and (tmp_path / "s.json.bad").exists()


# ------------------------------------------------------------- responsiveness
def test_bridge_coalesces_a_flood_of_tokens(qtbot, window):
    bridge = window.ctx.bridge
    got, emissions = [], []

    def flood(state, cancel, emit):
        for i in range(20000):
            emit(J.Tokens((i,), "x"))

    job = bridge.run(J.Call(flood))
    job.tokens.connect(lambda text, n: (got.append(text), emissions.append(n)))
    with qtbot.waitSignal(job.finished, timeout=30000):
        pass
    assert "".join(got) == "x" * 20000 and sum(emissions) == 20000
    assert len(emissions) < 2000  # merged: the event loop saw far fewer updates than tokens


def test_a_job_signals_only_its_own_events(qtbot, window):
    """Per-job routing: two jobs at once, each listener hears its own job only; an
    observer can follow a job it did not submit."""
    bridge = window.ctx.bridge
    heard = {"a": [], "b": [], "followed": []}

    def say(word):
        def fn(state, cancel, emit):
            for _ in range(50):
                emit(J.Tokens((1,), word))
            return word

        return fn

    def on_started(jid, job):
        if isinstance(job, J.Call) and job.label == "b":
            bridge.follow(jid).tokens.connect(lambda text, n: heard["followed"].append(text))

    bridge.started.connect(on_started)
    a, b = bridge.run(J.Call(say("a"), "a")), bridge.run(J.Call(say("b"), "b"))
    a.tokens.connect(lambda text, n: heard["a"].append(text))
    b.tokens.connect(lambda text, n: heard["b"].append(text))
    results = []
    b.finished.connect(lambda result, cancelled: results.append(result))
    qtbot.waitUntil(lambda: bool(results), timeout=30000)
    bridge.started.disconnect(on_started)
    assert set("".join(heard["a"])) == {"a"} and set("".join(heard["b"])) == {"b"}
    assert "".join(heard["followed"]) == "b" * 50 and results == ["b"]
    assert bridge.follow(a.id) is None  # ended: nothing left to follow


def test_errors_reach_the_user_through_one_place(qtbot, window, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    with qtbot.waitSignal(window.models.loadFailed, timeout=10000):
        window.models.load(bad)
    dialogs = window.ctx.messages.open_dialogs
    assert dialogs and "not a GGUF file" in dialogs[-1].text()
    assert "could not be loaded" in window.statusBar().currentMessage()
    for d in dialogs:
        d.close()


def test_many_signals_do_not_corrupt_the_interpreter():
    """PySide6 6.12.0's emit() drops a reference to True per call and aborts the process
    after enough signals; the pinned version must not."""
    from PySide6.QtCore import QObject, Signal

    class Emitter(QObject):
        ping = Signal()

    import sys

    e = Emitter()
    before = sys.getrefcount(True)
    for _ in range(300_000):
        e.ping.emit()
    # the broken release loses one reference to True per emit (and then aborts)
    assert abs(sys.getrefcount(True) - before) < 1000


def test_window_starts_without_the_heavy_parts(tmp_path):
    """The window comes up without importing the heavy parts (llama.cpp, numpy-heavy
    runtime, huggingface_hub, matplotlib); they load on the engine thread or on demand.
    (How long start-up takes is a figure: `python -m benchmarks.gui`.)"""
    import subprocess
    import sys

    code = (
        "import os, sys; os.environ['QT_QPA_PLATFORM']='offscreen'\n"
        "from app.main import build_app\n"
        "app, w, ctx = build_app(); w.show(); app.processEvents()\n"
        "print('loaded=' + ','.join(m for m in ('llama_cpp','huggingface_hub','matplotlib','starlette') if m in "
        "sys.modules))\n"
        "ctx.bridge.engine.stop()\n"
    )
    env = dict(__import__("os").environ, MTP_STUDIO_HOME=str(tmp_path / "h"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout.strip().splitlines()[-1] == "loaded="


def test_exact_arithmetic_is_a_saved_choice_that_applies_after_a_restart(qtbot, window, settings_path):
    """ggml reads its kernel switches once per process: the page says when the choice
    takes effect, and the setting survives (the next start sets the switches first)."""
    import json

    page = window.pages["backend"]
    assert not page.exact.isChecked()
    page.exact.setChecked(True)
    assert window.ctx.settings.exact is True
    assert json.loads(settings_path.read_text())["exact"] is True
    assert page.exact_note.text() == "takes effect after MTP Studio restarts"  # llama.cpp already ran here
    page.exact.setChecked(False)
    assert page.exact_note.text() == "" and json.loads(settings_path.read_text())["exact"] is False


def test_fallbacks_are_told_not_silent(qtbot, window, fixtures):
    """External MTP without a head loads with auto — and says so; an unload elsewhere
    clears the loaded model from the window."""
    with qtbot.waitSignal(window.models.notice, timeout=5000) as notice:
        with qtbot.waitSignal(window.models.loaded, timeout=30000):
            window.models.load(fixtures["partial"].path, None, "external")
    assert "external MTP needs a head file" in notice.args[0]
    assert "external MTP needs a head file" in window.statusBar().currentMessage()
    assert window.models.current.mtp == "integrated"
    with qtbot.waitSignal(window.models.unloaded, timeout=10000):
        window.ctx.bridge.run(J.UnloadModel())
    assert window.models.current is None and window.model_label.text() == "no model loaded"


def test_a_model_whose_paired_head_is_gone_loads_and_says_so(qtbot, window, fixtures):
    lib = window.ctx.library
    model, head = lib.import_file(fixtures["partial"].trunk), lib.import_file(fixtures["partial"].head)
    lib.pair(model.id, head.id)
    import shutil

    shutil.rmtree(head.folder(lib.root))  # removed behind the library's back
    page = window.pages["models"]
    page.refresh()
    row = next(i for i in range(page.table.rowCount()) if page.table.item(i, 0).text() == model.name)
    page.table.selectRow(row)
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        page.load_selected()
    assert "loaded without its MTP head" in window.statusBar().currentMessage()
    assert window.models.current.mtp == "off"


def test_chat_model_picker_lists_the_library_and_loads_the_pick(qtbot, window, fixtures, tmp_path):
    import shutil

    load(qtbot, window, fixtures["full"].path, "integrated")
    copy = tmp_path / "picked-partial.gguf"
    shutil.copyfile(fixtures["partial"].path, copy)
    entry = window.ctx.library.add([copy], name="Picked Partial", provenance={"source": "import"})
    chat = window.pages["chat"]
    pick = chat.controls.model_pick
    chat.controls.refresh_models(window.models.current.path)
    names = [pick.itemText(i) for i in range(pick.count())]
    assert "Picked Partial" in names
    assert pick.currentText() == "full"  # loaded from outside the library: listed as it is
    with qtbot.waitSignal(window.models.loaded, timeout=60000):
        pick.activated.emit(names.index("Picked Partial"))
    assert window.models.current.path == str(entry.path(window.ctx.library.root))
    assert pick.currentText() == "Picked Partial"
    window.ctx.library.delete(entry.id)
