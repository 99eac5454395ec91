"""``mtp-studio serve`` as a user starts it: a real process, the official client, a clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import openai
import pytest


def start_serve(model, *extra: str, env_extra: dict | None = None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "app.launcher", "serve", "--model", str(model), "--port", "0", "--ctx", "512", *extra]
    env = dict(os.environ, GGML_NO_BACKTRACE="1", **(env_extra or {}))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"at (http://127\.0\.0\.1:\d+/v1) \((.*)\)", line)
    if not m:
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read()}")
    return proc, m.group(1)


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def test_serve_answers_the_official_client_and_stops_cleanly(fixtures):
    proc, url = start_serve(fixtures["full"].path, "--draft-depth", "2")
    try:
        with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
            [model] = [m.id for m in client.models.list().data]
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=24, temperature=0
            )
            assert reply.usage.completion_tokens == 24 and reply.choices[0].message.content
            timings = reply.model_extra["timings"]
            assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]  # the 100% fixture
    finally:
        assert stop(proc) == 0


def test_api_key_from_the_environment_is_required_and_not_printed(fixtures):
    secret = "env-secret-4711"
    proc, url = start_serve(fixtures["full"].path, env_extra={"MTP_STUDIO_API_KEY": secret})
    try:
        with openai.OpenAI(base_url=url, api_key="wrong", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                client.models.list()
        with openai.OpenAI(base_url=url, api_key=secret, max_retries=0) as client:
            assert len(client.models.list().data) == 1
    finally:
        stop(proc)
    out, err = proc.communicate()
    assert secret not in out + err


def test_serve_says_once_that_repacking_is_off(fixtures):
    """On a CPU whose repacked kernels crash (here the user's own switch, as llama-server's)
    the console says so once, with the reason."""
    import threading

    proc, url = start_serve(fixtures["full"].path, env_extra={"LLAMA_ARG_REPACK": "0", "MTP_STUDIO_REPACK": ""})
    seen: list[str] = []

    def read() -> None:  # the note follows the start-up lines: stop the server only after it
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("note:"):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    stop(proc)
    err = "".join(seen) + proc.communicate()[1]
    assert err.count("CPU weight repacking is off on this CPU") == 1 and "LLAMA_ARG_REPACK=0 turns it off" in err


def test_serve_speaks_every_api_and_listens_where_ollama_clients_look(fixtures):
    import httpx

    proc, url = start_serve(fixtures["full"].path, "--ollama-port", "0")
    try:
        banner = [proc.stdout.readline() for _ in range(3)]
        apis = next(ln for ln in banner if ln.startswith("APIs:"))
        port = int(re.search(r"and port (\d+)", apis).group(1))
        root = url.removesuffix("/v1")
        assert "Anthropic" in apis and "Ollama" in apis
        names = [m["name"] for m in httpx.get(f"http://127.0.0.1:{port}/api/tags").json()["models"]]
        body = {"model": names[0], "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
        assert httpx.post(root + "/v1/messages", json=body, timeout=60).json()["usage"]["output_tokens"] == 4
        r = httpx.post(
            root + "/v1/responses", json={"model": names[0], "input": "Hi", "max_output_tokens": 4}, timeout=60
        )
        assert r.json()["usage"]["output_tokens"] == 4
    finally:
        assert stop(proc) == 0


def test_serve_without_a_model_serves_the_library_by_name_on_demand(fixtures, tmp_path):
    """A fresh install: `import` a file, then `serve` with no --model; the first request
    naming it loads it."""
    env = dict(os.environ, GGML_NO_BACKTRACE="1", MTP_STUDIO_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-m", "app.launcher", "import", str(fixtures["full"].path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    cmd = [sys.executable, "-m", "app.launcher", "serve", "--port", "0", "--ctx", "512", "--idle-ttl", "600"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"serving 1 library model\(s\) by name at (http://127\.0\.0\.1:\d+/v1)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        assert "loaded on demand, unloaded after 600 s idle, at most 3 at once" in line
        with openai.OpenAI(base_url=m.group(1), api_key="unused", max_retries=0) as client:
            [listed] = client.models.list().data
            assert listed.model_extra["state"] == "not-loaded"
            reply = client.chat.completions.create(
                model=fixtures["full"].path.stem, messages=[{"role": "user", "content": "Hi"}], max_tokens=8
            )
            assert reply.choices[0].message.content and reply.model == listed.id
            assert client.models.list().data[0].model_extra["state"] == "loaded"
    finally:
        assert stop(proc) == 0


def test_serve_loads_every_model_given_and_answers_each_by_name(fixtures):
    proc, url = start_serve(fixtures["full"].path, "--model", str(fixtures["partial"].path))
    try:
        with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
            listed = {m.id: m.model_extra["state"] for m in client.models.list().data}
            assert listed == {"full": "loaded", "partial": "loaded"}
            for name in listed:
                r = client.completions.create(model=name, prompt="a", max_tokens=2)
                assert r.model == name and r.usage.completion_tokens == 2
            with pytest.raises(openai.NotFoundError):  # the library is not served unless asked (--library)
                client.completions.create(model="demo", prompt="a", max_tokens=2)
    finally:
        assert stop(proc) == 0


def test_serve_says_what_is_wrong_with_the_model_files_it_is_given(fixtures, tmp_path):
    missing = tmp_path / "nowhere.gguf"
    done = subprocess.run(
        [sys.executable, "-m", "app.launcher", "serve", "--model", str(missing), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, GGML_NO_BACKTRACE="1"),
    )
    assert done.returncode != 0 and "not found" in done.stderr and "nowhere.gguf" in done.stderr
    (tmp_path / "a").mkdir()
    twin = tmp_path / "a" / fixtures["full"].path.name
    twin.write_bytes(fixtures["full"].path.read_bytes())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.launcher",
            "serve",
            "--model",
            str(fixtures["full"].path),
            "--model",
            str(twin),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, GGML_NO_BACKTRACE="1"),
    )
    assert done.returncode != 0 and "several --model files are named full" in done.stderr
