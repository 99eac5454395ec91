"""The Hugging Face browser with projectors: listed beside the models and marked, their
headers read on selection, "Download with vision" fetching a model with its projector,
and the library showing that the model sees. Offscreen, on a real window and the fake Hub."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt

from engine.synth.demo import demo_model_path
from tests.engine.hub.fakehub import FakeHub, FakeHubServer
from tests.synth.projector import write_projector

REPO = "unsloth/Tiny-MTP-GGUF"


def test_download_with_vision_fetches_the_model_and_its_projector(qtbot, window, monkeypatch, tmp_path):
    hub = FakeHub()
    hub.add_repo(
        REPO,
        {
            "Tiny-Q8_0.gguf": demo_model_path(),
            "mmproj-BF16.gguf": write_projector(tmp_path / "bf16.gguf", "qwen3vl_merger", 192, seed=2),
            "mmproj-F16.gguf": write_projector(tmp_path / "f16.gguf", "qwen3vl_merger", 192, seed=1),
        },
        downloads=5,
    )
    with FakeHubServer(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        page = window.pages["models"]
        window.show_page("models")
        page.query.setText("tiny")
        qtbot.mouseClick(page.search_btn, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(
            lambda: page.repos.count() == 1 and page.repos.item(0).data(Qt.ItemDataRole.UserRole) == REPO,
            timeout=10000,
        )
        page.repos.setCurrentRow(0)
        qtbot.waitUntil(lambda: page.files.count() == 3, timeout=10000)
        lines = [page.files.item(i).text() for i in range(3)]
        assert "Tiny-Q8_0.gguf" in lines[0] and all("[projector]" in t for t in lines[1:])

        page.files.setCurrentRow(2)  # a projector: its header says what it reads; it is not a model to download
        qtbot.waitUntil(lambda: "projector" in page.file_info.text(), timeout=10000)
        assert "vision projector (qwen3vl_merger)" in page.file_info.text() and "192" in page.file_info.text()
        assert "[vision projector]" in page.files.item(2).text()
        assert not page.pull_btn.isEnabled() and not page.pull_vision_btn.isEnabled()
        assert "with its model" in page.pull_btn.toolTip()
        _shot(page, "hub-projector-selected.png")

        page.files.setCurrentRow(0)
        qtbot.waitUntil(lambda: "qwen35" in page.file_info.text(), timeout=10000)
        assert page.pull_vision_btn.isEnabled() and not page.pull_head_btn.isEnabled()
        assert "mmproj-F16.gguf" in page.pull_vision_btn.toolTip()  # F16 before BF16, as the rule says
        qtbot.mouseClick(page.pull_vision_btn, Qt.MouseButton.LeftButton)
        row = page.rows[-1]
        assert row.title.text() == f"{REPO}: Tiny-Q8_0.gguf + mmproj-F16.gguf"
        qtbot.waitUntil(lambda: row.state == "done", timeout=30000)
    assert "paired with its projector" in row.info.text()

    lib = window.ctx.library
    model = next(e for e in lib.entries() if e.kind == "model")
    assert lib.projector_path(model).name == "mmproj-F16.gguf"
    assert page.table.rowCount() == 2
    sees = {page.table.item(r, 0).text(): page.table.item(r, 7).text() for r in range(2)}
    assert sees[model.name] == "images"
    proj_row = next(r for r in range(2) if page.table.item(r, 0).data(Qt.ItemDataRole.UserRole) == model.projector)
    page.table.selectRow(proj_row)
    assert not page.load_btn.isEnabled()  # a projector alone is not a model to load
    assert "models 192 wide" in page.details.toHtml()
    _shot(page, "library-projector-selected.png")
    page.table.selectRow(1 - proj_row)
    assert page.load_btn.isEnabled() and "Sees" in page.details.toHtml()
    _shot(page, "models-download-with-vision.png")


def _shot(page, name: str) -> None:
    """The page as a PNG in $MTP_SCREENSHOT_DIR, when set: for a reviewer's eyes, not asserted."""
    folder = os.environ.get("MTP_SCREENSHOT_DIR")
    if folder:
        page.grab().save(os.path.join(folder, name))
