"""Every library model served by name, loaded on demand and unloaded when idle
(engine.runtime.ondemand), with embeddings and reranking beside the chat models: a real
engine, a real library of tiny models, a real server, the official clients."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace

import httpx
import numpy as np
import pytest

from engine.hub.library import Library
from engine.runtime.ondemand.residency import estimate_bytes
from tests.server.ondemandserving import BASE, Served, ids as _ids, spec_for, wait as _wait

REPO = "example-org/Fixture-Full-GGUF"


@pytest.fixture(scope="module")
def pooled_files(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("pooled")
    done = subprocess.run(
        [sys.executable, "-m", "tests.synth.pooledmodels", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "GGML_NO_BACKTRACE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def library(fixtures, pooled_files, tmp_path_factory) -> Library:
    """A library of two chat models (one from the Hub), an embedding model and a reranker."""
    root = tmp_path_factory.mktemp("ondemand-lib")
    lib = Library(root / "models")
    src = root / "src"
    src.mkdir()

    def add(path, name, provenance):
        copy = src / path.name
        shutil.copyfile(path, copy)
        return lib.add([copy], name=name, provenance=provenance)

    add(fixtures["full"].path, "Fixture Full", {"source": "hub", "repo": REPO, "revision": "abc", "files": []})
    add(fixtures["partial"].path, "Fixture Partial", {"source": "import"})
    from pathlib import Path

    add(Path(pooled_files["mean"]), "Fixture Embedder", {"source": "import"})
    add(Path(pooled_files["rank"]), "Fixture Reranker", {"source": "import"})
    return lib


# ------------------------------------------------------------------ names and lists
def test_every_library_model_is_listed_with_its_state_and_kind(serve, library):
    s = serve()
    from openai import OpenAI

    with OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as c:
        listed = {m.id: m for m in c.models.list().data}
    ids = _ids(library)
    assert set(listed) == set(ids.values())
    assert all(m.model_extra["state"] == "not-loaded" for m in listed.values())
    kinds = {m.id: m.model_extra["meta"]["kind"] for m in listed.values()}
    assert kinds[ids["Fixture Embedder"]] == "embedding"
    assert kinds[ids["Fixture Reranker"]] == "rerank"
    assert kinds[ids["Fixture Full"]] == "chat"
    assert listed[ids["Fixture Full"]].model_extra["meta"]["mtp"] == "integrated"
    assert listed[ids["Fixture Embedder"]].model_extra["type"] == "embeddings"
    tags = httpx.get(s.url + "/api/tags").json()["models"]
    assert {t["name"] for t in tags} == set(ids.values())
    emb = next(t for t in tags if t["name"] == ids["Fixture Embedder"])
    assert emb["size"] > 0
    assert s.loaded() == []  # listing loads nothing


def test_a_request_by_each_kind_of_name_loads_that_model(serve, library):
    s = serve(max_loaded=3)
    from openai import OpenAI
    import ollama

    ids = _ids(library)
    full = next(e for e in library.entries() if e.name == "Fixture Full")
    quant = full.summary["quantization"]
    with OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as c:
        # its display name, through the OpenAI client
        r = c.chat.completions.create(model="Fixture Full", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert r.model == ids["Fixture Full"]
        assert r.choices[0].message.content
        assert s.loaded() == [ids["Fixture Full"]]
        # its file's stem: the same model, not a second copy
        c.completions.create(model=full.files[0].removesuffix(".gguf"), prompt="a", max_tokens=2)
        assert s.loaded() == [ids["Fixture Full"]]
    # Ollama's hf.co/OWNER/REPO:QUANT, and the repository name with :latest
    oc = ollama.Client(host=s.url)
    reply = oc.chat(
        model=f"hf.co/{REPO}:{quant}", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 3}
    )
    assert reply.message.content
    oc.generate(model=REPO.split("/")[1] + ":latest", prompt="a", options={"num_predict": 2})
    assert s.loaded() == [ids["Fixture Full"]]
    # the library id of another model loads it beside the first
    oc.chat(model=ids["Fixture Partial"], messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2})
    assert s.loaded() == sorted([ids["Fixture Full"], ids["Fixture Partial"]])
    ps = {m["name"]: m for m in httpx.get(s.url + "/api/ps").json()["models"]}
    assert set(ps) == set(s.loaded())
    assert all(m["expires_at"] > "2026" and m["context_length"] == 4096 for m in ps.values())
    # a name nothing answers to: a 404 that lists the models
    with OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as c:
        from openai import NotFoundError

        with pytest.raises(NotFoundError, match="Fixture-Full"):
            c.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}], max_tokens=2)


def test_concurrent_first_requests_load_one_copy(serve, library):
    s = serve()
    ids = _ids(library)
    loads = []
    s.engine.observe(
        lambda h, ev: (
            loads.append(h.id) if type(h.job).__name__ == "LoadModel" and type(ev).__name__ == "Started" else None
        )
    )
    results = []

    def ask():
        r = httpx.post(
            s.url + "/v1/completions", json={"model": "Fixture Partial", "prompt": "a", "max_tokens": 2}, timeout=60
        )
        results.append(r.status_code)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 4
    assert len(loads) == 1
    assert s.loaded() == [ids["Fixture Partial"]]


def _estimates(s: Served, library) -> dict[str, int]:
    return {x.name: estimate_bytes(x, spec_for(x)) for x in s.catalog.items()}


def test_least_recently_used_idle_model_is_unloaded_to_make_room(serve, library):
    ids = _ids(library)
    probe = serve()
    est = _estimates(probe, library)
    full, partial, emb = ids["Fixture Full"], ids["Fixture Partial"], ids["Fixture Embedder"]
    # room for the two chat models, not for a third model beside them
    budget = est[full] + est[partial] + est[emb] // 2
    s = serve(memory_budget=budget)
    for name in (full, partial):
        assert (
            httpx.post(
                s.url + "/v1/completions", json={"model": name, "prompt": "a", "max_tokens": 2}, timeout=60
            ).status_code
            == 200
        )
    httpx.post(
        s.url + "/v1/completions", json={"model": full, "prompt": "b", "max_tokens": 2}, timeout=60
    )  # full: most recent
    r = httpx.post(s.url + "/v1/embeddings", json={"model": emb, "input": "hello"}, timeout=60)
    assert r.status_code == 200, r.text
    assert s.loaded() == sorted([full, emb])  # partial, least recently used, made room


def test_a_model_that_cannot_fit_is_refused_with_the_figures(serve, library):
    ids = _ids(library)
    s = serve(memory_budget=1 << 20)
    r = httpx.post(
        s.url + "/v1/chat/completions",
        json={"model": ids["Fixture Full"], "messages": [{"role": "user", "content": "x"}]},
        timeout=60,
    )
    assert r.status_code == 503
    msg = r.json()["error"]["message"]
    assert "needs about" in msg and "budget" in msg and "1 MiB" in msg
    assert s.loaded() == []


def test_max_loaded_unloads_the_idle_one_and_never_a_busy_one(serve, library):
    ids = _ids(library)
    s = serve(max_loaded=1)
    full, partial = ids["Fixture Full"], ids["Fixture Partial"]
    httpx.post(s.url + "/v1/completions", json={"model": full, "prompt": "a", "max_tokens": 2}, timeout=60)
    # a long stream on partial holds it: a request for full cannot unload it
    with httpx.stream(
        "POST",
        s.url + "/v1/completions",
        json={"model": partial, "prompt": "a", "max_tokens": 400, "stream": True, "ignore_eos": True},
        timeout=60,
    ) as st:
        lines = st.iter_lines()
        next(line for line in lines if line.startswith("data: {"))
        assert s.loaded() == [partial]  # full, idle, made room
        r = httpx.post(s.url + "/v1/completions", json={"model": full, "prompt": "a", "max_tokens": 2}, timeout=60)
        assert (
            r.status_code == 503
            and "busy" in r.json()["error"]["message"]
            or "at most 1" in r.json()["error"]["message"]
        )
        assert s.loaded() == [partial]
        st.close()


def test_idle_ttl_and_keep_alive(serve, library):
    import ollama

    ids = _ids(library)
    s = serve(idle_ttl=0.5)
    full, partial = ids["Fixture Full"], ids["Fixture Partial"]
    oc = ollama.Client(host=s.url)
    # keep_alive -1: kept past the idle TTL; /api/ps says so
    oc.generate(model=full, prompt="a", options={"num_predict": 2}, keep_alive=-1)
    # the default TTL: unloaded once idle half a second
    oc.generate(model=partial, prompt="a", options={"num_predict": 2})
    assert _wait(lambda: s.loaded() == [full], 10)
    ps = httpx.get(s.url + "/api/ps").json()["models"]
    assert [m["name"] for m in ps] == [full] and ps[0]["expires_at"].startswith("2318")
    # keep_alive 0 with no prompt: Ollama's way to unload now
    r = httpx.post(s.url + "/api/generate", json={"model": full, "keep_alive": 0}, timeout=60).json()
    assert r["done_reason"] == "unload"
    assert s.loaded() == []
    # no prompt, no keep_alive: a preload, then a TTL of its own (LM Studio's ttl, seconds)
    assert httpx.post(s.url + "/api/chat", json={"model": full}, timeout=60).json()["done_reason"] == "load"
    assert s.loaded() == [full]
    httpx.post(s.url + "/v1/completions", json={"model": full, "prompt": "a", "max_tokens": 2, "ttl": 300}, timeout=60)
    left = [m for m in s.residency.loaded() if m.name == full][0].expires_in_s
    assert 250 < left <= 300
    bad = httpx.post(s.url + "/api/generate", json={"model": full, "prompt": "a", "keep_alive": "soon"}, timeout=60)
    assert bad.status_code == 400 and "keep_alive" in bad.json()["error"]


def test_a_stream_goes_on_while_another_model_loads(serve, library):
    ids = _ids(library)
    s = serve()
    full, partial = ids["Fixture Full"], ids["Fixture Partial"]
    httpx.post(s.url + "/v1/completions", json={"model": full, "prompt": "a", "max_tokens": 2}, timeout=60)
    stamps: list[float] = []
    load_window: list[float] = []

    def load_other():
        _wait(lambda: len(stamps) >= 50)  # the stream is under way
        t0 = time.monotonic()
        r = httpx.post(s.url + "/v1/completions", json={"model": partial, "prompt": "a", "max_tokens": 1}, timeout=60)
        load_window.extend([t0, time.monotonic(), r.status_code])

    other = threading.Thread(target=load_other)
    with httpx.stream(
        "POST",
        s.url + "/v1/completions",
        json={"model": full, "prompt": "a", "max_tokens": 4000, "stream": True, "ignore_eos": True, "mtp": "off"},
        timeout=60,
    ) as st:
        assert st.status_code == 200, st.read()
        other.start()
        for line in st.iter_lines():
            if line.startswith("data: {"):
                stamps.append(time.monotonic())
            elif line.strip():
                print(line)
    other.join()
    assert s.loaded() == sorted([full, partial])
    t0, t1, status = load_window
    assert status == 200
    assert stamps[0] < t0 and stamps[-1] > t1, "the stream ended before the load: nothing was measured"
    gaps = np.diff(stamps)
    during = [g for a, g in zip(stamps[1:], gaps) if t0 <= a <= t1]
    median = float(np.median(gaps))
    assert during, "no token arrived while the other model loaded"
    assert max(during) < max(0.5, 50 * median), (max(during), median, t1 - t0)


# ------------------------------------------------------------------ embeddings and rerank
def _reference(path: str, texts: list[str]) -> np.ndarray:
    """llama.cpp's own pooled embeddings (llama-cpp-python's high-level API)."""
    import llama_cpp

    llm = llama_cpp.Llama(path, embedding=True, n_ctx=256, verbose=False)
    try:
        return np.array(llm.embed(texts, normalize=True))
    finally:
        llm.close()


TEXTS = ["the cat sat on the mat", "hello world", "a"]


def test_embeddings_equal_llama_cpp_pooled_embeddings(serve, library):
    from openai import OpenAI
    import ollama

    ids = _ids(library)
    emb = ids["Fixture Embedder"]
    entry = library.get(emb)
    ref = _reference(str(entry.path(library.root)), TEXTS)
    s = serve()
    with OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0) as c:
        r = c.embeddings.create(model="Fixture Embedder", input=TEXTS, encoding_format="float")
    got = np.array([d.embedding for d in r.data])
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=2e-3)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert r.usage.prompt_tokens > len(TEXTS)
    # base64: float32 bytes of the same vectors
    raw = httpx.post(s.url + "/v1/embeddings", json={"model": emb, "input": TEXTS, "encoding_format": "base64"}).json()
    b64 = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw["data"]])
    np.testing.assert_array_equal(b64, got.astype(np.float32))
    # Ollama's /api/embed, and dimensions (cut, unit length again)
    oe = ollama.Client(host=s.url).embed(model=emb, input=TEXTS)
    np.testing.assert_allclose(np.array(oe.embeddings), got, atol=1e-6)
    short = httpx.post(s.url + "/v1/embeddings", json={"model": emb, "input": "hello world", "dimensions": 8}).json()
    v = np.array(short["data"][0]["embedding"])
    assert len(v) == 8 and abs(np.linalg.norm(v) - 1) < 1e-5


def test_rerank_orders_documents_by_score(serve, library):
    ids = _ids(library)
    s = serve()
    rr = ids["Fixture Reranker"]
    docs = ["the cat sat", "dogs bark loudly", "hello", "a cat and a mat", "numbers 1 2 3"]
    one = [
        httpx.post(s.url + "/v1/rerank", json={"model": rr, "query": "cat", "documents": [d]}, timeout=60).json()[
            "results"
        ][0]["relevance_score"]
        for d in docs
    ]
    assert len(set(np.round(one, 6))) > 1, "the reranker gave every document the same score"
    r = httpx.post(
        s.url + "/v1/rerank",
        json={"model": rr, "query": "cat", "documents": docs, "top_n": 3, "return_documents": True},
        timeout=60,
    ).json()
    order = sorted(range(len(docs)), key=lambda i: -one[i])[:3]
    assert [x["index"] for x in r["results"]] == order
    np.testing.assert_allclose([x["relevance_score"] for x in r["results"]], [one[i] for i in order], atol=1e-4)
    assert r["results"][0]["document"]["text"] == docs[order[0]]
    tei = httpx.post(s.url + "/rerank", json={"model": rr, "query": "cat", "texts": docs}, timeout=60).json()
    assert [x["index"] for x in tei][:3] == order


def test_each_model_answers_only_what_it_does(serve, library):
    ids = _ids(library)
    s = serve()
    r = httpx.post(
        s.url + "/v1/chat/completions",
        json={"model": ids["Fixture Embedder"], "messages": [{"role": "user", "content": "x"}]},
        timeout=60,
    )
    assert (
        r.status_code == 400
        and "embedding model" in r.json()["error"]["message"]
        and "/v1/embeddings" in r.json()["error"]["message"]
    )
    r = httpx.post(s.url + "/v1/embeddings", json={"model": ids["Fixture Partial"], "input": "x"}, timeout=60)
    assert r.status_code == 400 and "chat model" in r.json()["error"]["message"]
    r = httpx.post(
        s.url + "/v1/rerank", json={"model": ids["Fixture Embedder"], "query": "q", "documents": ["d"]}, timeout=60
    )
    assert r.status_code == 400 and "reranking model" in r.json()["error"]["message"]


def test_keep_alive_zero_answers_once_the_model_is_gone(serve, library):
    """The reply to an unload comes after the unload, also when the model's expiry (set
    to now by the same request) started it first."""
    ids = _ids(library)
    s = serve()
    full = ids["Fixture Full"]
    for _ in range(5):
        httpx.post(s.url + "/v1/completions", json={"model": full, "prompt": "a", "max_tokens": 2}, timeout=60)
        r = httpx.post(s.url + "/api/generate", json={"model": full, "keep_alive": 0}, timeout=60).json()
        assert r["done_reason"] == "unload"
        assert full not in s.engine.models()


def test_odd_ollama_bodies_are_answered_in_words_and_unloading_loads_nothing(serve, library):
    ids = _ids(library)
    s = serve()
    full = ids["Fixture Full"]
    # a body with no model: a 400 that says so (not a 500)
    r = httpx.post(s.url + "/api/generate", json={}, timeout=60)
    assert r.status_code == 400 and "model" in r.json()["error"]
    # keep_alive 0 for a model that is not loaded: answered at once, nothing loaded
    r = httpx.post(s.url + "/api/chat", json={"model": full, "keep_alive": 0}, timeout=60).json()
    assert r["done_reason"] == "unload" and s.loaded() == []
    # durations that are not: 400s
    for bad in ("nan", "1.2.3s", "inf"):
        r = httpx.post(s.url + "/api/generate", json={"model": full, "prompt": "a", "keep_alive": bad}, timeout=60)
        assert r.status_code == 400 and "keep_alive" in r.json()["error"], bad
    assert s.loaded() == []


def test_a_model_loaded_by_hand_stays_whatever_keep_alive_a_request_sends_but_zero(serve, library, fixtures):
    import ollama

    from engine.runtime import jobs as J

    s = serve(idle_ttl=0.2)
    s.engine.submit(J.LoadModel(replace(BASE, path=fixtures["partial"].path, name="by-hand"), replace=False)).result(60)
    oc = ollama.Client(host=s.url)
    oc.generate(model="by-hand", prompt="a", options={"num_predict": 2}, keep_alive="1s")
    time.sleep(1.5)  # past both the request's keep_alive and the idle TTL
    assert "by-hand" in s.loaded()
    assert [m.pinned for m in s.residency.loaded() if m.name == "by-hand"] == [True]
    oc.generate(model="by-hand", prompt="a", options={"num_predict": 2}, keep_alive=0)
    assert _wait(lambda: "by-hand" not in s.loaded(), 10)
