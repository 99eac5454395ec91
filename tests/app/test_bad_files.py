"""The app starts whatever its settings and chat files hold, tells the user, and keeps
everything they had; a chat id is never a path."""

from __future__ import annotations

import json
import random

import pytest

from app.history import BadConversation, ChatStore, Conversation


def _chat(folder, cid, **over):
    data = {
        "id": cid,
        "title": f"chat {cid}",
        "system": "",
        "messages": [{"role": "user", "content": "hi"}],
        "created": 1.0,
        "updated": 2.0,
        "model": None,
        **over,
    }
    (folder / f"{cid}.json").write_text(json.dumps(data))


@pytest.fixture
def store(tmp_path):
    folder = tmp_path / "chats"
    folder.mkdir()
    return ChatStore(folder)


@pytest.mark.parametrize(
    "over",
    [
        {"updated": None},
        {"messages": [1]},
        {"messages": "x"},
        {"title": 5},
        {"messages": [{"role": "bogus", "content": "x"}]},
        {"created": "yesterday"},
        {"model": 3},
        {"id": "../../escape"},
    ],
)
def test_one_bad_chat_file_is_set_aside_and_the_others_load(store, over):
    _chat(store.folder, "aaaaaaaaaaaa")
    _chat(store.folder, "bbbbbbbbbbbb", **over)
    convs = store.all()
    assert [c.id for c in convs] == ["aaaaaaaaaaaa"]
    assert store.quarantined == ["bbbbbbbbbbbb.json"]
    assert (store.folder / "bbbbbbbbbbbb.json.bad").is_file()


def test_a_chat_id_is_never_used_as_a_path(store, tmp_path):
    victim = tmp_path / "escape.json"
    victim.write_text("mine")
    conv = Conversation(id="../escape")
    with pytest.raises(BadConversation):
        store.save(conv)
    with pytest.raises(BadConversation):
        store.delete("../escape")
    assert victim.read_text() == "mine" and not list(store.folder.iterdir())


def test_random_corruptions_of_history_files_never_raise_and_keep_good_files(store):
    rng = random.Random(3)
    good = store.new()
    good.messages = [{"role": "user", "content": "keep me"}]
    store.save(good)
    for i in range(200):
        cid = f"{i:012x}"
        _chat(store.folder, cid)
        p = store.folder / f"{cid}.json"
        b = bytearray(p.read_bytes())
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        p.write_bytes(bytes(b))
    convs = store.all()
    assert good.id in [c.id for c in convs]
    n_files = len(list(store.folder.glob("*.json"))) + len(list(store.folder.glob("*.json.bad")))
    assert n_files == 201  # every file is still there, under one name or the other


def test_the_window_starts_on_bad_settings_and_chats_and_says_so(qtbot, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MTP_STUDIO_HOME", str(home))
    from engine.paths import data_dir

    chats = data_dir() / "chats"
    chats.mkdir(parents=True)
    _chat(chats, "aaaaaaaaaaaa")
    _chat(chats, "bbbbbbbbbbbb", updated=None)
    settings_path = tmp_path / "settings.json"
    settings_path.write_text(json.dumps({"schema_version": 2, "mtp": {"source": "bogus"}, "n_ctx": -1}))
    from app.main import build_app

    _, win, ctx = build_app(settings_path=settings_path)
    qtbot.addWidget(win)
    try:
        texts = [d.text() for d in ctx.messages.open_dialogs]
        assert any("mtp.source" in t and "n_ctx" in t for t in texts), texts
        assert any("bbbbbbbbbbbb.json" in t for t in texts), texts
        assert ctx.settings.mtp.source == "auto" and ctx.settings.n_ctx == 4096
        assert win.pages["chat"].history.count() == 1
        for d in ctx.messages.open_dialogs:
            d.close()
    finally:
        win.close()
        ctx.bridge.engine.stop()


@pytest.mark.parametrize("text", ["[]", "null", '{"schema_version": "two"}', '{"mtp": {"source": "bogus"}}'])
def test_the_window_starts_on_each_bad_settings_shape(qtbot, tmp_path, monkeypatch, text):
    monkeypatch.setenv("MTP_STUDIO_HOME", str(tmp_path / "home"))
    settings_path = tmp_path / "settings.json"
    settings_path.write_text(text)
    from app.main import build_app

    _, win, ctx = build_app(settings_path=settings_path)
    qtbot.addWidget(win)
    try:
        assert ctx.messages.open_dialogs and ctx.settings.mtp.source == "auto"
        for d in ctx.messages.open_dialogs:
            d.close()
    finally:
        win.close()
        ctx.bridge.engine.stop()
