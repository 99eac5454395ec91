"""The bundled demo model is what engine.synth.demo builds, and it demonstrates MTP."""

from __future__ import annotations

from engine.runtime import jobs as J
from engine.runtime.engine import Engine
from engine.runtime.loader import LoadSpec
from engine.synth.demo import SENTENCE, build_demo, demo_model_path


def test_committed_demo_is_reproducible(tmp_path):
    build_demo(tmp_path / "demo.gguf")
    assert (tmp_path / "demo.gguf").read_bytes() == demo_model_path().read_bytes()


def test_demo_answers_with_its_sentence_using_mtp():
    with Engine() as eng:
        info = eng.submit(J.LoadModel(LoadSpec(demo_model_path()))).result(60)
        assert info["mtp"] == "integrated" and info["nextn_layers"] == 1
        r = eng.submit(J.Generate(messages=[{"role": "user", "content": "hello"}], draft_depth=3)).result(60)
        assert r.text == "".join(SENTENCE) and r.finish_reason == "stop"
        assert 0.7 < r.stats.acceptance < 1.0
