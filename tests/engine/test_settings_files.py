"""A settings file of any shape never stops the app from starting, and nothing the user
had is deleted: an unusable file is kept aside, bad values are reset one by one."""

from __future__ import annotations

import json
import random

import pytest

from engine import settings as S


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "null",
        "42",
        '"x"',
        '{"schema_version": "two"}',
        '{"schema_version": true}',
        '{"schema_version": 0}',
        "{not json",
        "[" * 100_000,
    ],
)
def test_an_unusable_file_is_kept_aside_and_defaults_are_used(tmp_path, text):
    p = tmp_path / "settings.json"
    p.write_text(text)
    settings, problems = S.load_checked(p)
    assert settings == S.Settings()
    assert problems and "settings.json.bad" in problems[0]
    assert (tmp_path / "settings.json.bad").read_text() == text and not p.exists()


@pytest.mark.parametrize(
    "data,field,default",
    [
        ({"mtp": {"source": "bogus"}}, "mtp.source", "auto"),
        ({"mtp": {"depth": "99"}}, "mtp.depth", "auto"),
        ({"n_ctx": -1}, "n_ctx", 4096),
        ({"n_ctx": True}, "n_ctx", 4096),
        ({"n_ctx": 12}, "n_ctx", 4096),
        ({"max_draft_depth": 100}, "max_draft_depth", 4),
        ({"server": {"port": 99999}}, "server.port", 8080),
        ({"server": {"port": "80"}}, "server.port", 8080),
        ({"chat": {"temperature": float("nan")}}, "chat.temperature", None),
        ({"chat": "loud"}, "chat", None),
        ({"server": {"cors_origins": [1, 2]}}, "server.cors_origins", []),
        ({"last_model": 5}, "last_model", None),
        ({"server": {"media_urls": "yes"}}, "server.media_urls", False),
        ({"server": {"media_folder": 5}}, "server.media_folder", None),
    ],
)
def test_bad_values_are_reset_one_by_one_and_the_rest_kept(tmp_path, data, field, default):
    p = tmp_path / "settings.json"
    original = {"schema_version": 2, "n_ctx": 2048, "chat": {"system_prompt": "keep me"}, **data}
    p.write_text(json.dumps(original))
    before = p.read_bytes()
    settings, problems = S.load_checked(p)
    assert any(field in x for x in problems), problems
    if default is not None:
        section, _, name = field.rpartition(".")
        obj = getattr(settings, section) if section else settings
        assert getattr(obj, name) == default
    if "n_ctx" not in data:
        assert settings.n_ctx == 2048
    if "chat" not in data:
        assert settings.chat.system_prompt == "keep me"
    assert (tmp_path / "settings.json.bad").read_bytes() == before  # the bad file kept aside as it was
    assert p.read_bytes() == before  # and left in place until the app saves over it


def test_a_good_file_has_no_problems(tmp_path):
    p = tmp_path / "settings.json"
    S.save(S.Settings(n_ctx=2048), p)
    settings, problems = S.load_checked(p)
    assert problems == [] and settings.n_ctx == 2048 and not (tmp_path / "settings.json.bad").exists()


def test_random_corruptions_always_load(tmp_path):
    """Bounded fuzz: byte flips, truncations and type swaps of a real settings file."""
    good = json.dumps(S.asdict(S.Settings(last_model="/m.gguf")), indent=2)
    rng = random.Random(7)
    values = [None, True, -1, 1e309, "x", [], {}, [1], 99999]
    for i in range(300):
        kind = i % 3
        if kind == 0:
            b = bytearray(good.encode())
            for _ in range(rng.randint(1, 5)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            text = bytes(b).decode("utf-8", "replace")
        elif kind == 1:
            text = good[: rng.randrange(len(good))]
        else:
            d = json.loads(good)
            key = rng.choice(list(d))
            d[key] = (
                rng.choice(values)
                if rng.random() < 0.5
                else {k: rng.choice(values) for k in ("source", "port", "depth")}
            )
            text = json.dumps(d)
        p = tmp_path / f"s{i}.json"
        p.write_text(text)
        settings, _ = S.load_checked(p)
        assert isinstance(settings, S.Settings)
        assert settings.mtp.source in S.CHOICES["mtp.source"] and 64 <= settings.n_ctx
        assert isinstance(settings.server.port, int) and 0 <= settings.server.port <= 65535


def test_sampling_preferences_may_be_unset_and_a_bad_one_is_reset_to_unset(tmp_path):
    """A sampling preference left unset (None, or absent) stays unset: the engine's value
    goes through. One of the wrong type or out of range is unset again, and said."""
    p = tmp_path / "settings.json"
    chat = {"temperature": 0.7, "top_p": None, "top_k": "40", "sampled_draft": 1, "suffix_drafts": False}
    p.write_text(json.dumps({"schema_version": 2, "chat": dict(chat, max_tokens=77)}))
    settings, problems = S.load_checked(p)
    c = settings.chat
    assert (c.temperature, c.top_p, c.top_k, c.sampled_draft, c.suffix_drafts) == (0.7, None, None, None, False)
    assert c.max_tokens == 77
    assert any("chat.top_k" in x and "not a int" in x for x in problems), problems
    assert any("chat.sampled_draft" in x and "not a bool" in x for x in problems), problems
    p.write_text(json.dumps({"schema_version": 2, "chat": {"temperature": 3.5, "top_k": 20}}))
    settings, problems = S.load_checked(p)
    assert settings.chat.temperature is None and settings.chat.top_k == 20
    assert any("chat.temperature" in x and "out of range" in x for x in problems), problems
