"""The OpenAI-compatible endpoint over a pooled model, with the official client: streamed
chat works, and a helper that dies mid-stream ends the request with a clear 503, not a
hung connection or a dead server."""

from __future__ import annotations

import openai
import pytest

from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.jobs import Defaults
from engine.runtime.load.loader import LoadSpec
from engine.server.runner import ServerThread
from engine.server.settings import ServerSettings
from engine.synth.demo import demo_model_path
from tests.engine.rpc.conftest import start_server


def test_streamed_chat_over_rpc_and_a_helper_lost_mid_stream():
    helper = start_server()
    try:
        with Engine(EngineConfig(request=Defaults(draft_depth="auto"))) as engine:
            engine.submit(J.LoadModel(LoadSpec(demo_model_path(), n_ctx=1024, rpc=(str(helper.endpoint),)))).result(120)
            srv = ServerThread(engine, ServerSettings(port=0)).start()
            srv.wait_ready()
            try:
                with openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0) as client:
                    stream = client.chat.completions.create(
                        model="demo", messages=[{"role": "user", "content": "Hello!"}], max_tokens=24, stream=True
                    )
                    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                    assert text.strip()
                    helper.kill()
                    with pytest.raises(openai.APIStatusError) as err:
                        client.completions.create(model="demo", prompt="def f(x):", max_tokens=64)
                    assert err.value.status_code == 503 and "was lost" in err.value.message
                    with pytest.raises(openai.NotFoundError):  # the model is gone, visibly
                        client.completions.create(model="demo", prompt="x", max_tokens=2)
            finally:
                srv.stop()
    finally:
        helper.stop()
