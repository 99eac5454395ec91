"""The prompt cache as endpoint clients see it (official ``openai`` client, real HTTP):
cached prompt tokens in ``usage`` and ``timings``, and the cache's figures in /metrics."""

from __future__ import annotations

import pytest

import httpx2 as httpx
from engine.runtime.engine import EngineConfig
from engine.runtime.load.loader import LoadSpec, MtpSource
from engine.server.settings import ServerSettings
from tests.server.serving import serving

MODEL = "qwen35-template"
SYSTEM = {"role": "system", "content": " ".join(f"Rule {i}: be brief." for i in range(80))}


@pytest.fixture(scope="module")
def served(qwen35_template_model):
    spec = LoadSpec(qwen35_template_model, mtp=MtpSource.INTEGRATED, n_ctx=4096, name=MODEL)
    settings = ServerSettings(port=0, max_tokens=24, thinking_budget=8)
    with serving([spec], settings, EngineConfig(prompt_cache_mb=32)) as (srv, _):
        yield srv


def test_cached_tokens_are_reported_in_usage_timings_and_metrics(served):
    from openai import OpenAI

    with OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0) as client:
        convs = {"A": [SYSTEM], "B": [SYSTEM]}
        replies = {}
        for turn in range(2):
            for name, msgs in convs.items():
                msgs.append({"role": "user", "content": f"{name}{turn}: which rule first?"})
                r = client.chat.completions.create(model=MODEL, messages=msgs)
                replies[name, turn] = r
                m = r.choices[0].message
                msgs.append(
                    {
                        "role": "assistant",
                        "content": m.content or "",
                        "reasoning_content": m.model_extra.get("reasoning_content") or "",
                    }
                )
    first = replies["A", 0]
    assert first.usage.prompt_tokens_details.cached_tokens == first.model_extra["timings"]["cache_n"]
    for name in "AB":
        later = replies[name, 1]
        cached = later.usage.prompt_tokens_details.cached_tokens
        t = later.model_extra["timings"]
        assert cached == t["cache_n"] > 0 and t["cache_restored_n"] > 0
        assert t["prompt_n"] == later.usage.prompt_tokens - cached
        assert t["prompt_n"] < later.usage.prompt_tokens // 4  # only the new turn was decoded
    text = httpx.get(served.url + "/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert values['mtp_prompt_cache_requests_total{result="hit"}'] >= 3
    assert values["mtp_prompt_cache_entries"] > 0 and values["mtp_prompt_cache_bytes"] > 0
    assert values["mtp_prompt_cache_budget_bytes"] == 32 << 20
    assert values["mtp_prompt_cache_restored_tokens_total"] > 0
