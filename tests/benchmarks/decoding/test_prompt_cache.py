"""``bench prompt-cache`` on the trained demo with Qwen3.5-4B's real chat template
(fetched with llama.cpp's vendored corpus), in exact mode, in a child process: with the
cache the later turns decode only their new tokens, and the output is bit-identical to
the same conversations decoded without it."""

from __future__ import annotations

import pytest

from tests.engine.cli_helpers import mtp_json


@pytest.fixture(scope="module")
def template_file(tmp_path_factory, qwen35_template):
    path = tmp_path_factory.mktemp("tmpl") / "Qwen3.5-4B.jinja"
    path.write_text(qwen35_template, encoding="utf-8")
    return path


def test_demo_with_qwen35_template_resumes_every_turn_bit_identically_in_exact_mode(template_file):
    out = mtp_json(
        "bench",
        "prompt-cache",
        "--template",
        str(template_file),
        "--turns",
        "3",
        "--agent-steps",
        "3",
        "--system-words",
        "300",
        "--max-tokens",
        "32",
        "--ctx",
        "4096",
        "--exact",
        timeout=600,
    )
    assert out["exact"] is True
    assert set(out["scenarios"]) == {"chat", "two", "agent"}
    for name, s in out["scenarios"].items():
        assert s["identical"], name
        cache, plain = s["per_turn"]["cache"], s["per_turn"]["no_cache"]
        first = 2 if name == "two" else 1
        # without the cache every later turn of this hybrid model is decoded from its first token
        assert all(t["decoded"] == t["prompt_tokens"] for t in plain[first:]), name
        for t in cache[first:]:
            assert t["restored"] > 0 and t["decoded"] < 100, (name, t)
        d = s["later_turns_decoded"]
        assert d["cache"] * 5 < d["no_cache"], name
        assert s["snapshots"] > 0 and s["snapshot_bytes_per_entry"] > 0
    # B's first turn shares A's system prompt: restored, not decoded
    b0 = out["scenarios"]["two"]["per_turn"]["cache"][1]
    assert b0["restored"] > 250
