"""Screenshots of every page for the README and docs/screenshots.md, taken offscreen with ``QWidget.grab()``.

    python -m tools.screenshots docs/screenshots

Builds a realistic state first: the bundled (trained) demo model in a two-turn chat, then
replies on it with MTP (auto depth, the default), without, and with again for the Performance
page; a constructed model and its head in the library
(and served by a local stand-in for Hugging Face, whose files get their fit badges), a compatible pair on the Compose
page, the Backend page sharing this machine over RPC with the model pooled over it, and
the endpoint serving a few requests, one of them loading a library model on demand.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")
    out.mkdir(parents=True, exist_ok=True)
    home = tempfile.mkdtemp(prefix="mtp-shots-")
    os.environ["MTP_STUDIO_HOME"] = home
    import httpx2
    from PySide6.QtCore import QEventLoop, QTimer

    from app.main import build_app
    from engine.synth.benchmodel import bench_spec
    from engine.synth.qwen35 import build_model

    def wait(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def until(cond, limit_ms: int = 60000) -> None:
        waited = 0
        while not cond() and waited < limit_ms:
            wait(50)
            waited += 50

    models = Path(home) / "src"
    models.mkdir()
    spec = bench_spec(64, 0.8, seed=11)
    spec = spec.__class__(**{**spec.__dict__, "name": "Qwen3.5-style 64 MB (constructed, 80% draft acceptance)"})
    built = build_model(
        spec,
        models / "qwen35-mini-F16.gguf",
        trunk_path=models / "qwen35-mini-trunk-F16.gguf",
        head_path=models / "mtp-qwen35-mini-F16.gguf",
    )
    app, w, ctx = build_app()
    w.resize(1280, 820)
    w.show()
    w.models.load_startup()
    until(lambda: w.models.current is not None)
    lib = ctx.library
    lib.import_file(built.trunk)
    lib.import_file(built.head)
    entries = {e.kind: e for e in lib.entries()}
    lib.pair(entries["model"].id, entries["head"].id)
    w.pages["models"].refresh()
    w.pages["models"].table.selectRow(0)

    chat = w.pages["chat"]
    for text in ("Hello!", "What is MTP?"):
        chat.input.setPlainText(text)
        chat.send()
        until(lambda: chat.job is None)
    w.show_page("chat")
    wait(300)
    w.grab().save(str(out / "chat.png"))

    ctx.settings.chat.max_tokens = 200
    chat.depth.setCurrentText("auto")  # the default: what a new user sees
    asks = (
        ("auto", "Who are you?"),
        ("off", "Write a Python class for a stack."),
        ("auto", "What is speculative decoding?"),
        ("auto", "Write a Python class for a stack."),
    )
    for source, text in asks:
        if chat.source.currentData() != source:
            chat.source.setCurrentIndex(chat.source.findData(source))
            until(lambda: not w.models.busy)
        chat.new_chat()
        chat.input.setPlainText(text)
        chat.send()
        until(lambda: chat.job is None)
    w.show_page("performance")
    wait(600)
    w.grab().save(str(out / "performance.png"))

    # the Models page with a repository listed: a local stand-in for Hugging Face serves
    # the constructed model, and each file gets its fit badge from its headers
    from tests.engine.hub.fakehub import FakeHub, FakeHubServer

    hub = FakeHub()
    hub.add_repo(
        "acme/Qwen3.5-mini-MTP-GGUF",
        {
            "qwen35-mini-MTP-F16.gguf": built.integrated,
            "qwen35-mini-F16.gguf": built.trunk,
            "mtp-qwen35-mini-F16.gguf": built.head,
        },
    )
    with FakeHubServer(hub):
        os.environ["HF_ENDPOINT"] = hub.url
        page = w.pages["models"]
        w.show_page("models")
        page.open_repo("acme/Qwen3.5-mini-MTP-GGUF", "qwen35-mini-MTP-F16.gguf")
        until(lambda: page.files.count() == 3 and sum("\n" in page.files.item(i).text() for i in range(3)) == 2)
        until(lambda: "context" in page.file_info.text())
        wait(300)
        w.grab().save(str(out / "models.png"))
    del os.environ["HF_ENDPOINT"]

    comp = w.pages["compose"]
    w.show_page("compose")
    comp.target.set_path(str(entries["model"].path(lib.root)))
    comp.head.set_path(str(entries["head"].path(lib.root)))
    until(comp.compose_btn.isEnabled)
    comp.compose()
    until(lambda: comp.task is None)
    wait(300)
    w.grab().save(str(out / "compose.png"))

    w.show_page("backend")
    until(lambda: w.pages["backend"].plan is not None)
    rpc = w.pages["backend"].rpc  # share this machine on loopback, then pool the model over it
    from engine.rpc.server import free_port

    rpc.port.setValue(free_port())
    rpc.toggle_serving()
    rpc.endpoints.setText(str(rpc.server.endpoint))
    loads = []
    w.models.loaded.connect(loads.append)
    rpc.apply()
    until(lambda: loads)
    wait(300)
    w.grab().save(str(out / "backend.png"))
    rpc.endpoints.setText("")
    rpc.apply()
    until(lambda: len(loads) > 1)
    rpc.stop_serving()

    srv = w.pages["server"]
    w.show_page("server")
    srv.port.setValue(18080)
    srv.start()
    name = w.models.current.name
    httpx2.get(w.endpoint.url + "/v1/models")
    httpx2.post(
        w.endpoint.url + "/v1/chat/completions",
        json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32},
    )
    httpx2.post(w.endpoint.url + "/v1/completions", json={"model": "gpt-4o", "prompt": "hi"})
    httpx2.get(w.endpoint.url + "/health")
    httpx2.post(
        w.endpoint.url + "/v1/messages",
        json={"model": name, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    )
    httpx2.get(w.endpoint.url + "/api/tags")
    system = {"role": "system", "content": "You are a careful assistant. Answer briefly. " * 20}
    for who in ("first", "second", "first"):  # two conversations taking turns: the prompt cache
        httpx2.post(
            w.endpoint.url + "/v1/chat/completions",
            json={
                "model": name,
                "max_tokens": 16,
                "messages": [system, {"role": "user", "content": f"Hello from the {who} conversation"}],
            },
        )
    # a library model named by a request: loaded on demand beside the window's model
    httpx2.post(
        w.endpoint.url + "/v1/completions",
        json={"model": entries["model"].id, "prompt": "hi", "max_tokens": 8},
        timeout=120,
    )
    srv.refresh_cache()
    srv.refresh_loaded()
    wait(500)
    w.grab().save(str(out / "server.png"))
    srv.stop()
    ctx.bridge.engine.stop()
    print(f"screenshots in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
