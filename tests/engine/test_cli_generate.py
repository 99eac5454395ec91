"""``mtp-studio generate``: the command a user runs, in a child process."""

from __future__ import annotations

import json

import pytest

from engine.synth.qwen35 import Qwen35Spec
from tests.engine.cli_helpers import mtp_json, mtp_studio
from tests.models import build_fixture


@pytest.fixture(scope="module")
def unseen(tmp_path_factory):
    """Models no other test uses: new seeds, another shape."""
    folder = tmp_path_factory.mktemp("unseen")
    return {
        "random": build_fixture("u-random", folder, Qwen35Spec(weights="random", seed=901, n_embd=96, head_dim=24)),
        "partial": build_fixture(
            "u-partial",
            folder,
            Qwen35Spec(weights="constructed", seed=902, draft_agreement=0.6, draft_pattern="random", trunk_noise=1.5),
        ),
    }


@pytest.mark.parametrize("name", ["random", "partial"])
def test_json_tokens_identical_with_mtp_off_and_on(unseen, name):
    fx = unseen[name]
    args = ["generate", "--prompt", "Tell me a story about a cat.", "--max-tokens", "40"]
    off = mtp_json(*args, "--model", str(fx.path), "--mtp", "off")
    assert set(off) == {"tokens", "text", "stats", "model"}
    assert off["stats"]["mtp"] == "off" and off["stats"]["drafted"] == 0 and len(off["tokens"]) == 40
    for extra in (
        ["--model", str(fx.path), "--mtp", "integrated", "--draft-depth", "1"],
        ["--model", str(fx.path), "--mtp", "auto", "--draft-depth", "3"],
        ["--model", str(fx.trunk), "--head", str(fx.head), "--mtp", "external", "--draft-depth", "2"],
    ):
        on = mtp_json(*args, *extra)
        assert on["tokens"] == off["tokens"] and on["text"] == off["text"]
        st = on["stats"]
        assert st["mtp"] == "on" and st["drafted"] > 0
        for key in ("draft_depth", "accepted", "acceptance", "mean_accept_len", "target_forwards", "tokens_per_second"):
            assert key in st
        assert st["target_forwards"] < 40


def test_chat_json(fixtures, tmp_path):
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "Hello"}]))
    out = mtp_json(
        "generate",
        "--model",
        str(fixtures["full"].path),
        "--chat-json",
        str(chat),
        "--max-tokens",
        "8",
        "--draft-depth",
        "1",
    )  # auto, the default, may not draft in 8 tokens on a fresh model
    assert len(out["tokens"]) == 8 and out["stats"]["acceptance"] == 1.0


def test_errors_go_to_stderr_with_a_nonzero_exit(fixtures, tmp_path):
    p = mtp_studio("generate", "--model", str(tmp_path / "missing.gguf"), "--prompt", "x", "--json")
    assert p.returncode == 1 and p.stdout == "" and "not found" in p.stderr
    p = mtp_studio("generate", "--model", str(fixtures["full"].trunk), "--mtp", "integrated", "--prompt", "x")
    assert p.returncode == 1 and "no NextN" in p.stderr
    p = mtp_studio("generate", "--model", "x.gguf")
    assert p.returncode == 2 and "--prompt" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    p = mtp_studio("generate", "--model", str(fixtures["full"].path), "--chat-json", str(bad))
    assert p.returncode == 2 and "not valid JSON" in p.stderr


def test_generate_with_a_json_schema_and_a_bad_grammar(tmp_path):
    from engine.synth.demo import demo_model_path

    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    out = mtp_json(
        "generate",
        "--model",
        str(demo_model_path()),
        "--prompt",
        "JSON:",
        "--max-tokens",
        "40",
        "--draft-depth",
        "2",
        "--json-schema",
        str(tmp_path / "s.json"),
    )
    value = json.loads(out["text"])
    assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and 0 <= value["n"] <= 9
    assert out["stats"]["forced"] > 0 and out["stats"]["stop_reason"] == "eog"
    (tmp_path / "bad.gbnf").write_text("root ::= undefined")
    r = mtp_studio(
        "generate", "--model", str(demo_model_path()), "--prompt", "x", "--grammar", str(tmp_path / "bad.gbnf")
    )
    assert r.returncode != 0 and "gbnf" in r.stderr and "Traceback" not in r.stderr


def test_generate_leaves_what_the_user_did_not_set_to_the_engine(fixtures):
    """The command line passes only what was given: the rest comes from the same layer the
    app and `serve` use (auto depth), not from copies of the defaults in its options."""
    from engine.runtime.decider import INTERACTIVE

    out = mtp_json("generate", "--model", str(fixtures["full"].path), "--prompt", "Hello", "--max-tokens", "4")
    assert out["stats"]["draft_depth"] == INTERACTIVE.draft_depth.to_json() == "auto"
    assert out["stats"]["sampled"] is False and len(out["tokens"]) == 4


def test_a_chat_template_file_replaces_the_models_own(fixtures, tmp_path):
    """``--chat-template-file``: the chat is rendered with that template (here one that
    writes a marker no other template does), and the model says where its template is from;
    an unreadable file is refused with its name."""
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "Hello"}]))
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}<<assistant>>")
    args = ["generate", "--model", str(fixtures["full"].path), "--chat-json", str(chat), "--max-tokens", "4"]
    own = mtp_json(*args)
    out = mtp_json(*args, "--chat-template-file", str(template))
    assert (
        "--chat-template-file" in out["model"]["chat_template"]
        and "--chat-template-file" not in own["model"]["chat_template"]
    )
    assert out["stats"]["prompt_tokens"] != own["stats"]["prompt_tokens"]
    p = mtp_studio(*args, "--chat-template-file", str(tmp_path / "missing.jinja"))
    assert p.returncode == 1 and "missing.jinja" in p.stderr


def test_suffix_drafts_from_the_command_line(fixtures):
    """Suffix drafts (on by default; ``--no-suffix-drafts``) with MTP off reach the decoder: the
    full fixture is a bigram
    model, so after a prompt that holds its own earlier answer the drafts come from the
    prompt (how many are kept depends on how the text tokenizes again: the gain itself is
    tested in-process, tests/engine/runtime/test_suffix.py); the tokens are plain decoding's."""
    model = ["--model", str(fixtures["full"].path), "--mtp", "off"]
    start = "Once upon a time"
    earlier = mtp_json("generate", *model, "--prompt", start, "--max-tokens", "120", "--no-suffix-drafts")["text"]
    args = ["generate", *model, "--prompt", start + earlier + start, "--max-tokens", "100"]
    plain = mtp_json(*args, "--no-suffix-drafts")
    assert plain["stats"]["suffix_rounds"] == 0
    suffix = mtp_json(*args)  # on by default
    assert suffix["tokens"] == plain["tokens"]
    st = suffix["stats"]
    assert st["suffix_rounds"] > 0 and st["suffix_accepted"] > 0
    assert st["target_forwards"] < plain["stats"]["target_forwards"]
