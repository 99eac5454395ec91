"""Pictures in the chat: pasted, dropped and chosen pictures wait above the input, a
damaged one is refused in words, a turn with pictures reaches the real engine (the demo
with a tiny projector the fixture writes) and is kept with the conversation, and a model
without a projector says so and offers to find one."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QTextDocument
from PySide6.QtWidgets import QApplication

from app.history import ChatStore
from engine.facade import demo_model_path
from engine.facade.media import MEDIA_PART, Media
from tests.app.conftest import load
from tests.synth.images import jpeg_bytes, png_bytes, truncated_png
from tests.synth.projector import write_projector


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory) -> Path:
    return write_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-demo.gguf", "qwen3vl_merger", 192)


@pytest.fixture
def chat(window):
    window.show_page("chat")
    return window.pages["chat"]


def drop(qtbot, widget, paths: list[Path]) -> bool:
    """Drag ``paths`` over ``widget`` and drop them, as a file manager does: whether the
    drop was taken."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    target = widget.viewport()
    at = target.rect().center()
    enter = QDragEnterEvent(
        at, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(target, enter)
    if not enter.isAccepted():
        return False
    ev = QDropEvent(
        QPointF(at), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(target, ev)
    return ev.isAccepted()


def reply(qtbot, chat, send) -> object:
    """Run ``send`` (it starts a reply) and wait for the reply's result."""
    send()
    assert chat.job is not None, chat.transcript.toPlainText()
    with qtbot.waitSignal(chat.job.finished, timeout=60000) as got:
        pass
    return got.args[0]


def test_a_pasted_image_waits_as_a_thumbnail(qtbot, chat):
    QApplication.clipboard().setImage(QImage.fromData(png_bytes(40, 30, 1)))
    chat.input.setFocus()
    qtbot.keyClick(chat.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    (p,) = chat.tray.pictures
    assert (p.name, p.media.mime, p.media.width, p.media.height) == ("The pasted image", "image/png", 40, 30)
    assert chat.input.toPlainText() == ""  # a picture, not text
    assert chat.tray.isVisible() and not chat.tray.error.isVisible() and not chat.tray.blind
    # text still pastes as text
    QApplication.clipboard().setText("hello")
    qtbot.keyClick(chat.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert chat.input.toPlainText() == "hello" and len(chat.tray.pictures) == 1
    # text copied from an office program comes with a picture of itself: it pastes as text
    rich = QMimeData()
    rich.setText(" world")
    rich.setImageData(QImage.fromData(png_bytes(20, 10, 3)))
    QApplication.clipboard().setMimeData(rich)
    chat.input.paste()
    assert chat.input.toPlainText() == "hello world" and len(chat.tray.pictures) == 1


def test_a_copied_image_file_pastes_as_its_own_bytes(qtbot, chat, tmp_path):
    f = tmp_path / "photo.jpg"
    f.write_bytes(jpeg_bytes(48, 32, 2))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(f))])
    QApplication.clipboard().setMimeData(mime)
    chat.input.paste()
    (p,) = chat.tray.pictures
    assert (p.name, p.media.mime, p.media.data) == ("photo.jpg", "image/jpeg", f.read_bytes())


def test_dropped_pictures_are_attached_and_a_damaged_one_is_refused_in_words(qtbot, chat, tmp_path):
    good, other, bad = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "broken.png"
    good.write_bytes(png_bytes(64, 48, 1))
    other.write_bytes(png_bytes(32, 32, 2))
    bad.write_bytes(truncated_png(32, 32))
    assert drop(qtbot, chat.input, [good])
    assert [p.name for p in chat.tray.pictures] == ["a.png"] and not chat.tray.error.isVisible()
    assert drop(qtbot, chat.transcript, [other])  # the transcript takes drops too
    assert [p.name for p in chat.tray.pictures] == ["a.png", "b.png"]
    assert drop(qtbot, chat.input, [bad])
    assert len(chat.tray.pictures) == 2  # nothing attached
    assert chat.tray.error.isVisible() and chat.tray.error.text().startswith("broken.png ")
    assert "PNG" in chat.tray.error.text() and chat.input.toPlainText() == ""
    # the remove × takes one back; the tray hides once empty
    chat.tray._thumbs[0].remove_btn.click()
    assert [p.name for p in chat.tray.pictures] == ["b.png"]
    chat.tray._thumbs[0].remove_btn.click()
    assert chat.tray.pictures == [] and not chat.tray.isVisible()


def test_a_file_that_is_no_picture_is_refused(qtbot, chat, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("just words")
    chat.tray.attach_files([str(notes), str(tmp_path / "gone.png")])
    assert chat.tray.pictures == []
    words = chat.tray.error.text()
    assert words.startswith("notes.txt is ") and "PNG, JPEG" in words and "gone.png could not be read" in words


def test_a_turn_with_a_picture_reaches_the_engine_and_is_kept(qtbot, window, chat, mmproj):
    info = load_seeing(qtbot, window, mmproj)
    assert "vision" in info.modalities
    window.ctx.settings.chat.max_tokens = 6
    chat.controls.temperature.setValue(0.0)
    question = "What is in this picture?"

    chat.input.setPlainText(question)
    text_only = reply(qtbot, chat, chat.send).stats.prompt_tokens
    chat.new_chat()
    chat.tray.add([_picture("a.png", png_bytes(64, 48, 1))])
    assert not chat.tray.blind  # this model sees
    chat.input.setPlainText(question)
    first = reply(qtbot, chat, chat.send)
    assert first.stats.prompt_tokens > text_only + 4  # the picture's rows went into the prompt
    assert chat.tray.pictures == [] and not chat.tray.isVisible()

    sent = chat.conv.messages[0]
    assert sent["content"] == question and [(p["name"], p["mime"]) for p in sent["images"]] == [("a.png", "image/png")]
    assert chat.conv.messages[-1]["role"] == "assistant"
    # the transcript shows the turn with its thumbnail
    thumb = chat.transcript.document().resource(QTextDocument.ResourceType.ImageResource.value, QUrl("pic:0"))
    assert isinstance(thumb, QImage) and (thumb.width(), thumb.height()) == (64, 48)
    # Regenerate sends the picture again
    again = reply(qtbot, chat, chat.regenerate)
    assert again.stats.prompt_tokens == first.stats.prompt_tokens

    # a picture-only turn: the second message is the pictures alone
    chat.tray.add([_picture("b.png", png_bytes(32, 32, 2))])
    reply(qtbot, chat, chat.send)
    parts = chat.conv.chat_messages()[2]["content"]
    assert [p["type"] for p in parts] == [MEDIA_PART]

    # kept across a restart: the bytes base64 with their MIME type, restored as media parts
    (kept,) = [c for c in ChatStore(window.ctx.chats.folder).all() if c.id == chat.conv.id]
    assert kept.messages[0]["images"] == sent["images"]
    content = kept.chat_messages()[0]["content"]
    assert content[0] == {"type": "text", "text": question}
    assert content[1]["type"] == MEDIA_PART and content[1]["media"] == Media("image", png_bytes(64, 48, 1), "image/png")


def test_a_model_without_a_projector_says_it_cannot_see_and_finds_one(qtbot, window, chat):
    load(qtbot, window, demo_model_path())
    assert not chat.tray.isVisible()
    chat.tray.add([_picture("a.png", png_bytes(64, 48, 1))])
    assert chat.tray.blind and chat.tray.find_btn.isVisible()
    assert "cannot see images" in chat.tray.sight_note.text()

    chat.tray.find_btn.click()
    assert window.current_page == "models"
    assert window.pages["models"].query.text() == window.models.current.name
    window.show_page("chat")

    # sent anyway: the engine's refusal is said under the turn
    window.ctx.settings.chat.max_tokens = 4
    chat.input.setPlainText("What is this?")
    chat.send()
    with qtbot.waitSignal(chat.job.failed, timeout=60000):
        pass
    shown = chat.transcript.toPlainText()
    assert "Not answered:" in shown and "mmproj" in shown
    for box in window.ctx.messages.open_dialogs:
        box.close()
    # the note stays while the conversation holds pictures; a new chat has none
    assert chat.tray.blind
    chat.new_chat()
    assert not chat.tray.blind and not chat.tray.isVisible()


def load_seeing(qtbot, window, mmproj: Path):
    with qtbot.waitSignal(window.models.loaded, timeout=60000):
        window.models.load(demo_model_path(), mmproj=mmproj)
    return window.models.current


def _picture(name: str, data: bytes):
    from app.pages.chat.images import check

    return check(data, name)


def test_a_kept_picture_damaged_on_disk_is_said_and_a_malformed_one_set_aside(qtbot, window, chat, tmp_path):
    store = ChatStore(tmp_path / "chats")
    conv = store.new()
    conv.messages = [
        {"role": "user", "content": "Look", "images": [{"name": "a.png", "mime": "image/png", "data": "!!"}]}
    ]
    store.save(conv)
    bad = store.new()
    bad.messages = [{"role": "user", "content": "x", "images": [{"mime": 3}]}]
    store.save(bad)
    (kept,) = store.all()
    assert kept.id == conv.id and store.quarantined == [f"{bad.id}.json"]

    chat.conv = kept
    chat.regenerate()  # the damaged picture is said under the turn; nothing is sent
    assert chat.job is None
    shown = chat.transcript.toPlainText()
    assert "Not answered: a.png (picture 1 of message 1)" in shown and "base64" in shown


def test_the_last_model_comes_back_with_its_projector_after_a_restart(qtbot, settings_path, tmp_path, mmproj):
    """Like its MTP head, the projector a model was loaded with is loaded again at start."""
    import shutil

    from app.main import build_app

    model = shutil.copy(demo_model_path(), tmp_path / "mine.gguf")  # the demo itself is not remembered
    _, win, ctx = build_app(settings_path=settings_path)
    qtbot.addWidget(win)
    with qtbot.waitSignal(win.models.loaded, timeout=60000):
        win.models.load(model, mmproj=mmproj)
    win.close()
    ctx.bridge.engine.stop()
    assert ctx.settings.last_mmproj == str(mmproj)

    _, win2, ctx2 = build_app(settings_path=settings_path)
    qtbot.addWidget(win2)
    with qtbot.waitSignal(win2.models.loaded, timeout=60000):
        win2.models.load_startup()
    try:
        info = win2.models.current
        assert info.path == str(model) and info.projector == str(mmproj) and "vision" in info.modalities
    finally:
        win2.close()
        ctx2.bridge.engine.stop()
