"""The Server page (app/pages/server.py) under pytest-qt offscreen: start, serve and log
requests, the prompt-cache budget, each slot while requests decode together, and library models
loaded on demand with their Unload."""

from __future__ import annotations

import httpx2
from PySide6.QtCore import Qt

from engine.runtime import jobs as J
from tests.app.conftest import load


def test_server_page_start_request_log_stop(qtbot, window, fixtures):
    load(qtbot, window, fixtures["full"].path, "integrated")
    page = window.pages["server"]
    page.host.setText("127.0.0.1")
    page.port.setValue(_free_port())
    assert page.start()
    assert "full: chat template the model's own (tokenizer.chat_template)" in page.state.text()
    url = window.endpoint.url
    r = httpx2.post(url + "/v1/completions", json={"model": "full", "prompt": "Hi", "max_tokens": 4})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=5000)
    assert [page.table.item(0, c).text() for c in (1, 2, 3)] == ["POST", "/v1/completions", "200"]
    # the page lists every API's routes and counts requests by API
    assert (
        "/v1/responses" in page.routes.text()
        and "/v1/messages" in page.routes.text()
        and "/api/chat" in page.routes.text()
    )
    r = httpx2.post(
        url + "/v1/messages", json={"model": "full", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert r.status_code == 200 and r.json()["type"] == "message"
    assert httpx2.get(url + "/api/tags").json()["models"][0]["name"] == "full"
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=5000)
    assert page.api_counts.text() == "Requests by API: OpenAI 1  ·  Anthropic 1  ·  Ollama 1"
    page.stop()
    assert not window.endpoint.running and page.toggle.text() == "Start"
    page.host.setText("0.0.0.0")
    page.key.setText("")
    assert not page.start()  # beyond loopback without a key: refused, with a message
    assert "API key" in window.statusBar().currentMessage()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_page_prompt_cache_budget_and_figures(qtbot, window, fixtures):
    """The budget box sets the engine's budget (and the setting); the figures line shows
    what two conversations taking turns left in the cache."""
    load(qtbot, window, fixtures["partial"].path, "integrated")
    page = window.pages["server"]
    eng = window.ctx.bridge.engine
    page.cache_mb.setValue(0)
    assert window.ctx.settings.prompt_cache_mb == 0 and eng.prompt_cache_info().budget_bytes == 0
    assert page.cache_figures.text().startswith("off")
    page.cache_mb.setValue(16)
    assert window.ctx.settings.prompt_cache_mb == 16 and eng.prompt_cache_info().budget_bytes == 16 << 20
    system = {"role": "system", "content": "Be brief. " * 60}
    for text in ("first chat", "second chat", "first chat again"):
        eng.submit(J.Generate(messages=[system, {"role": "user", "content": text}], max_tokens=4)).result(60)
    page.refresh_cache()
    info = eng.prompt_cache_info()
    assert info.entries > 0 and info.hits >= 2
    shown = page.cache_figures.text()
    assert f"{info.entries} snapshots" in shown and "of 16 MB" in shown and f"{info.hits} hits" in shown


def test_server_page_shows_each_slot_while_requests_decode_together(qtbot, window, fixtures):
    """The slots box: the setting for the next load, and one row per slot of the loaded
    model, busy while its request decodes and idle after."""
    page = window.pages["server"]
    page.parallel.setValue(3)
    assert window.ctx.settings.parallel == 3
    load(qtbot, window, fixtures["partial"].path, "integrated")
    eng = window.ctx.bridge.engine
    assert window.models.current.parallel == 3
    handles = [eng.submit(J.Generate(prompt=p, max_tokens=400, ignore_eog=True)) for p in ("one", "two")]
    qtbot.waitUntil(lambda: sum(s.busy for s in next(iter(eng.slots().values()))) == 2, timeout=30000)
    qtbot.waitUntil(lambda: 2 in next(iter(eng.step_depths().values())), timeout=30000)
    page.refresh_slots()
    assert page.slot_table.rowCount() == 3
    states = [page.slot_table.item(r, 1).text() for r in range(3)]
    assert states.count("busy") == 2 and states.count("idle") == 1
    assert page.slot_figures.text().startswith("2 of 3 busy")
    assert "auto's depth in steps of 2: " in page.slot_figures.text()  # MTP auto's choice for steps of the two
    perf = window.pages["performance"]  # the Performance page's aggregate while both stream
    window.show_page("performance")
    perf._redraw()
    assert "2 streams:" in perf.summary.text() and "tok/s together" in perf.summary.text()
    for h in handles:
        h.cancel()
    qtbot.waitUntil(lambda: all(not s.busy for s in next(iter(eng.slots().values()))), timeout=30000)
    page.refresh_slots()
    assert [page.slot_table.item(r, 1).text() for r in range(3)] == ["idle"] * 3
    assert page.slot_figures.text().startswith("0 of 3 busy")


def test_server_page_loads_library_models_on_demand_and_lists_them_with_unload(qtbot, window, fixtures, tmp_path):
    """A request naming a library model loads it beside the window's model; the page's
    table shows it (memory, requests, when it unloads) and its Unload button unloads it."""
    import shutil

    load(qtbot, window, fixtures["full"].path, "integrated")
    copy = tmp_path / "on-demand-partial.gguf"
    shutil.copyfile(fixtures["partial"].path, copy)
    entry = window.ctx.library.add([copy], name="On Demand Partial", provenance={"source": "import"})
    page = window.pages["server"]
    page.port.setValue(_free_port())
    page.idle_ttl.setValue(30)
    assert page.start()
    assert "library model(s) served by name, loaded on demand" in page.state.text()
    r = httpx2.post(
        window.endpoint.url + "/v1/completions",
        json={"model": "On Demand Partial", "prompt": "Hi", "max_tokens": 3},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["model"] == entry.id
    assert sorted(window.ctx.bridge.engine.models()) == sorted(["full", entry.id])
    page.refresh_loaded()
    rows = {page.loaded_table.item(r, 0).text(): r for r in range(page.loaded_table.rowCount())}
    assert set(rows) == {"full", entry.id}
    row = rows[entry.id]
    assert page.loaded_table.item(row, 2).text() == "1"  # one request
    assert page.loaded_table.item(row, 4).text().startswith("in ")  # unloads when idle 30 min
    assert page.loaded_table.item(rows["full"], 4).text() == "by hand"  # the window's own model
    assert page.loaded_table.item(row, 1).text().endswith("MB")
    window.resize(1000, 1400)
    window.show_page("server")
    qtbot.wait(50)
    window.grab().save(str(tmp_path / "server-page-models.png"))
    # the Models page shows the same state, and offers Unload for a loaded entry
    models_page = window.pages["models"]
    models_page.refresh()
    lib_row = next(
        i
        for i in range(models_page.table.rowCount())
        if models_page.table.item(i, 0).data(Qt.ItemDataRole.UserRole) == entry.id
    )
    assert models_page.table.item(lib_row, 6).text() == "loaded"
    models_page.table.selectRow(lib_row)
    assert models_page.load_btn.text() == "Unload"
    details = models_page.details.toPlainText()
    assert "Answers \nchat" in details and "Loaded \nyes" in details
    page.loaded_table.cellWidget(row, 5).click()
    qtbot.waitUntil(lambda: entry.id not in window.ctx.bridge.engine.models(), timeout=20000)

    def listed() -> list[str]:  # the residency forgets the model once the engine's unload job returns
        page.refresh_loaded()
        return [page.loaded_table.item(r, 0).text() for r in range(page.loaded_table.rowCount())]

    qtbot.waitUntil(lambda: listed() == ["full"], timeout=5000)
    qtbot.waitUntil(lambda: models_page.table.item(lib_row, 6).text() == "", timeout=5000)  # told by the bridge
    page.stop()
    window.ctx.library.delete(entry.id)
