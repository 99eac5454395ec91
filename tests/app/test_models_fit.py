"""Will it fit, in the app: fit badges on the Models page's remote files, the models
recommended for this machine while the library is empty, a context lowered to fit,
and a refused load with its Load anyway. Real widgets offscreen, the real engine, the
real huggingface_hub client against the fake Hub; MTP_STUDIO_HOST_MEMORY stands in for
a smaller machine."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.context import load_depth
from app.messages import user_text
from app.pages.modelsfit import badge_text
from engine.errors import InsufficientMemoryError
from engine.gguf.memory import ModelShape
from engine.gguf.shards import open_set
from engine.runtime import limits
from engine.runtime.load import fit as fit_mod
from engine.runtime.load.fit import MARGIN_BYTES, DeviceFree
from tests.engine.hub.fakehub import FakeHub, FakeHubServer, Fault

MiB, GiB = 1 << 20, 1 << 30


def _need(path, n_ctx: int, *, mtp: bool) -> int:
    """Host bytes the local copy of ``path`` needs at ``n_ctx`` on a roomy CPU machine."""
    shape = ModelShape.of_set(open_set(path))
    return fit_mod.assess(
        shape, n_ctx, [DeviceFree("host memory", "cpu", 64 * GiB, 32 * GiB)], mtp=mtp
    ).estimate.host_bytes


def _expected_badge(window, path) -> str:
    """The badge the local file gets on this machine at the context setting."""
    s = window.ctx.settings
    shape = ModelShape.of_set(open_set(path))
    f = fit_mod.assess(shape, s.n_ctx, fit_mod.machine_devices(), mtp=shape.n_nextn > 0, depth=load_depth(s))
    return badge_text(f)


def _badges(page) -> dict[str, str | None]:
    """File name -> its badge line (None: no badge)."""
    out = {}
    for i in range(page.files.count()):
        item = page.files.item(i)
        lines = item.text().split("\n")
        out[item.data(Qt.ItemDataRole.UserRole)] = lines[1].strip() if len(lines) > 1 else None
    return out


def _click(qtbot, lst, row: int) -> None:
    qtbot.mouseClick(lst.viewport(), Qt.MouseButton.LeftButton, pos=lst.visualItemRect(lst.item(row)).center())


def _cpu_only() -> bool:
    return len(fit_mod.machine_devices()) == 1


def test_fit_badges_on_the_hub_files(qtbot, window, fixtures, monkeypatch):
    fx = fixtures["partial"]
    hub = FakeHub()
    hub.add_repo(
        "acme/Tiny-GGUF", {"tiny-F32.gguf": fx.path, "tiny-trunk-F32.gguf": fx.trunk, "mtp-tiny.gguf": fx.head}
    )
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        page = window.pages["models"]
        page.open_repo("acme/Tiny-GGUF")
        qtbot.waitUntil(lambda: page.files.count() == 3, timeout=10000)
        qtbot.waitUntil(lambda: sum(b is not None for b in _badges(page).values()) == 2, timeout=20000)
        badges = _badges(page)
        # the remote file's badge is the one its local copy gets, to the byte; heads get none
        assert badges == {
            "tiny-F32.gguf": _expected_badge(window, fx.path),
            "tiny-trunk-F32.gguf": _expected_badge(window, fx.trunk),
            "mtp-tiny.gguf": None,
        }
        if _cpu_only():
            assert badges["tiny-F32.gguf"] == "fits in memory (CPU), up to context 4096"
        item = page.hub.file_item("tiny-F32.gguf")
        assert "at context 4096" in item.toolTip() and "MiB" in item.toolTip()

        # a smaller machine: the MTP model fits only a shorter context, the trunk still fits
        low, full = _need(fx.path, limits.MIN_CTX, mtp=True), _need(fx.path, 4096, mtp=True)
        trunk = _need(fx.trunk, 4096, mtp=False)
        assert max(low, trunk) < full
        monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", str(MARGIN_BYTES + (max(low, trunk) + full) // 2))
        page.open_repo("acme/Tiny-GGUF")
        qtbot.waitUntil(lambda: _badges(page)["tiny-F32.gguf"] not in (None, badges["tiny-F32.gguf"]), timeout=20000)
        qtbot.waitUntil(lambda: _badges(page)["tiny-trunk-F32.gguf"] is not None, timeout=20000)
        small = _badges(page)
        assert small["tiny-F32.gguf"] == _expected_badge(window, fx.path)
        assert small["tiny-F32.gguf"].startswith("does not fit at context 4096; up to context ")
        assert small["tiny-trunk-F32.gguf"] == "fits in memory (CPU), up to context 4096"


def test_recommended_for_this_machine_when_the_library_is_empty(qtbot, window, fixtures, quantized, monkeypatch):
    hub = FakeHub()
    hub.add_repo(
        "acme/Tiny-MTP-GGUF",
        {
            "tiny-F32.gguf": fixtures["partial"].path,
            "tiny-Q8_0.gguf": quantized("partial", "Q8_0").path,
            "mtp-tiny.gguf": fixtures["partial"].head,
        },
    )
    hub.add_repo("acme/Small-MTP-GGUF", {"small-Q8_0.gguf": quantized("eos", "Q8_0").path})
    hub.add_repo("acme/Head-GGUF", {"mtp-head.gguf": fixtures["eos"].head})
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        page = window.pages["models"]
        box = page.recommended
        box.repos = ("acme/Missing-GGUF", "acme/Head-GGUF", "acme/Small-MTP-GGUF", "acme/Tiny-MTP-GGUF")
        assert not box.started
        window.show_page("models")  # first seen with an empty library: the check starts by itself
        assert box.isVisible() and page.empty.isVisible() and box.cancel_btn.isVisible()
        qtbot.waitUntil(lambda: box.results is not None, timeout=30000)
        entries = [box.list.item(i).text().split("\n") for i in range(box.list.count())]
        # best first: both fit in host memory, so the larger file leads
        assert [e[0] for e in entries] == ["acme/Tiny-MTP-GGUF", "acme/Small-MTP-GGUF"]
        if _cpu_only():
            assert entries[0][1].strip().startswith("F32, ") and entries[0][1].endswith(
                "fits in memory (CPU), up to context 4096"
            )
        assert box.status.text().startswith("2 of 4 fit at context 4096 with MTP (")
        assert "1 could not be checked: acme/Missing-GGUF: repository not found" in box.status.text()
        assert not box.cancel_btn.isVisible() and box.check_btn.isVisible()

        _click(qtbot, box.list, 0)  # opens the repo like a search hit, on the recommended file
        qtbot.waitUntil(lambda: page.files.count() == 3, timeout=10000)
        assert (
            page.repos.count() == 1 and page.repos.currentItem().data(Qt.ItemDataRole.UserRole) == "acme/Tiny-MTP-GGUF"
        )
        assert page.files.currentItem().data(Qt.ItemDataRole.UserRole) == "tiny-F32.gguf"
        assert page.pull_btn.isEnabled()
        qtbot.waitUntil(lambda: _badges(page)["tiny-Q8_0.gguf"] is not None, timeout=20000)

        # cancellable: a slow header read, cancelled, ends quietly
        hub.faults["small-Q8_0.gguf"] = Fault(slow=0.1, times=10**6)
        qtbot.mouseClick(box.check_btn, Qt.MouseButton.LeftButton)
        assert box.list.count() == 0 and box.cancel_btn.isVisible()
        qtbot.mouseClick(box.cancel_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: box.task is None, timeout=30000)
        assert box.status.text() == "Cancelled." and box.results is None and box.list.count() == 0
        assert window.ctx.messages.open_dialogs == []  # cancelling is not an error

    task = page.import_file(fixtures["eos"].path)  # a model in the library: no more recommendations
    qtbot.waitUntil(lambda: not task.running and page.table.rowCount() == 1, timeout=10000)
    assert not box.isVisible() and not page.empty.isVisible()


def test_context_lowered_to_fit_memory(qtbot, window, fixtures, monkeypatch):
    fx = fixtures["partial"]
    low, full = _need(fx.path, 256, mtp=True), _need(fx.path, 4096, mtp=True)
    monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", str(MARGIN_BYTES + (low + full) // 2))
    assert window.ctx.settings.n_ctx == 4096
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        window.models.load(fx.path, None, "integrated")
    info = window.models.current
    assert 256 <= info.n_ctx < 4096 and info.n_ctx % 256 == 0 and info.n_ctx_requested == 4096
    assert info.max_ctx_fits == info.n_ctx
    words = f"context lowered to {info.n_ctx} to fit memory (asked for 4096)"
    assert window.pages["chat"].figures.text().endswith(words)
    assert words in window.statusBar().currentMessage()

    monkeypatch.delenv("MTP_STUDIO_HOST_MEMORY")  # room enough: the setting stands, and how far it could go
    window.ctx.settings.n_ctx = 1024
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        window.models.load(fx.path, None, "integrated")
    assert window.pages["chat"].figures.text().endswith("context 1024 (fits up to 4096)")  # its training context
    assert "lowered" not in window.statusBar().currentMessage()
    window.ctx.settings.n_ctx = 32768  # beyond the model's training context: capped there, not lowered
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        window.models.load(fx.path, None, "integrated")
    assert window.pages["chat"].figures.text().endswith("context 4096 (the model's longest; it fits)")


def test_a_load_that_does_not_fit_is_refused_then_loaded_anyway(qtbot, window, fixtures, monkeypatch):
    fx = fixtures["partial"]
    monkeypatch.setenv("MTP_STUDIO_HOST_MEMORY", str(MARGIN_BYTES + 8 * MiB))  # not even the smallest context
    with qtbot.waitSignal(window.models.loadFailed, timeout=30000) as failed:
        window.models.load(fx.path, None, "integrated")
    error = failed.args[0]
    assert isinstance(error, InsufficientMemoryError) and error.fit["verdict"] == "none"
    assert window.models.current is None
    (box,) = window.ctx.messages.open_dialogs
    assert box.windowTitle() == "The model does not fit in memory"
    assert box.text() == user_text(error) and box.text().startswith("This model needs ")
    assert "Even a minimal context does not fit" in box.text()
    anyway = [b for b in box.buttons() if b.text() == "Load anyway"]
    assert len(anyway) == 1 and len(box.buttons()) == 2  # and Cancel
    with qtbot.waitSignal(window.models.loaded, timeout=30000):
        qtbot.mouseClick(anyway[0], Qt.MouseButton.LeftButton)
    info = window.models.current  # the engine thread kept serving, and the override skipped the check
    assert info.fit is None and info.n_ctx == 4096 and info.mtp == "integrated"
    assert window.pages["chat"].figures.text().endswith("· context 4096")
    assert "loaded without the memory check" in window.statusBar().currentMessage()
    assert window.ctx.messages.open_dialogs == []


def test_recommendations_when_the_hub_cannot_be_reached_say_so(qtbot, window, monkeypatch):
    """No repository could be read: that is no verdict on what fits this machine (it said
    "None of the 4 recommended models fits at context 4096")."""
    from engine.rpc.server import free_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    page = window.pages["models"]
    box = page.recommended
    box.repos = ("acme/One-GGUF", "acme/Two-GGUF")
    window.show_page("models")
    qtbot.waitUntil(lambda: box.results is not None, timeout=60000)
    text = box.status.text()
    assert text.startswith("Could not check the 2 recommended models: ") and "Check again" in text, text
    assert "fits" not in text and box.list.count() == 0
