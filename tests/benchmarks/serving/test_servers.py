"""benchmarks/serving/servers.py, the one helper that starts an endpoint process for a benchmark:
ready when made (it answers /health), and a server that dies before it answers is an
error that carries what it said."""

from __future__ import annotations

import urllib.request

import pytest

from benchmarks.serving.servers import ServerError, ServerProcess


def test_our_server_answers_when_made_and_is_gone_when_stopped(fixtures):
    with ServerProcess.ours(fixtures["full"].path, ["--ctx", "512"]) as server:
        with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
            assert r.status == 200
        assert server.model_name()
    assert server.proc.poll() is not None


def test_a_server_that_exits_before_it_answers_is_an_error_with_its_last_words(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ServerError) as e:
        ServerProcess.ours(missing, ["--ctx", "512"], ready_s=120)
    assert "mtp-studio serve exited with" in str(e.value) and "missing.gguf" in str(e.value)
