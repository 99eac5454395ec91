"""Pictures in a prompt: the real libmtmd on tiny random projectors the fixtures write,
decoded into the demo (qwen35, M-RoPE) with MTP drafting through them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import GGUFError, InvalidRequestError, PromptTooLongError
from engine.runtime import jobs as J
from engine.runtime.engine import Engine, EngineConfig
from engine.runtime.load.loader import LoadSpec
from engine.runtime.media import Media, part
from tests.synth.images import png_bytes
from tests.synth.projector import write_projector

DEMO = Path(__file__).resolve().parents[3] / "resources" / "demo.gguf"


def image(seed: int, w: int = 64, h: int = 48) -> Media:
    return Media("image", png_bytes(w, h, seed), "image/png", w, h)


def ask(m: Media, text: str = "What is in this picture?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, part(m)]}]


def gen(messages: list[dict], mtp: J.Mtp = J.Mtp.ON, n: int = 40, **kw) -> J.Generate:
    return J.Generate(messages=messages, max_tokens=n, ignore_eog=True, mtp=mtp, **kw)


@pytest.fixture(scope="module")
def qwen_mmproj(tmp_path_factory) -> Path:
    return write_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-demo.gguf", "qwen3vl_merger", 192)


def engine_on(mmproj: Path | None, parallel: int = 1) -> Engine:
    e = Engine(EngineConfig()).start()
    spec = LoadSpec(DEMO, n_ctx=1024, probe=False, fit="off", parallel=parallel, mmproj=mmproj)
    e.submit(J.LoadModel(spec)).result()
    return e


@pytest.fixture(scope="module")
def seeing(qwen_mmproj):
    e = engine_on(qwen_mmproj)
    yield e
    e.stop()


def test_the_model_says_it_sees(seeing):
    (info,) = seeing.models().values()
    assert info.modalities == ("vision",) and "vision" in info.capabilities
    assert info.projector is not None and info.projector.endswith("mmproj-demo.gguf")


def test_mtp_on_equals_off_and_two_pictures_differ(seeing):
    """Greedy MTP over a prompt with a picture emits plain greedy's tokens (the head drafts
    through the picture's rows), and two different pictures give different replies."""
    out = {}
    for seed in (1, 2):
        on = seeing.submit(gen(ask(image(seed)))).result()
        off = seeing.submit(gen(ask(image(seed)), J.Mtp.OFF)).result()
        assert on.tokens == off.tokens and len(on.tokens) == 40
        assert on.stats.drafted > 0 and on.stats.accepted > 0
        out[seed] = on.tokens
    assert out[1] != out[2]


def test_the_next_turn_reuses_the_picture_without_encoding_it_again(seeing):
    first = ask(image(7), "Describe it.")
    r1 = seeing.submit(gen(first, n=16)).result()
    encodes = _projector(seeing).encodes
    second = [*first, {"role": "assistant", "content": r1.text}, {"role": "user", "content": "And the colours?"}]
    r2 = seeing.submit(gen(second, n=16)).result()
    assert _projector(seeing).encodes == encodes  # its embeddings came from the projector's cache
    # the contexts kept the first turn: the picture's rows were not decoded again
    assert r2.stats.prompt_tokens_reused >= r1.stats.prompt_tokens - 1


def _projector(engine: Engine):
    (lm,) = engine._state.models.values()  # the seam: the loaded model itself
    return lm.projector


def test_a_picture_prompt_beside_text_streams_equals_each_alone(qwen_mmproj):
    """A picture of 192 rows joins two running text streams: its rows go in bounded
    chunks of their own decodes, and every output equals the one it gives alone."""
    jobs = [
        gen(ask(image(3, 256, 192)), n=32),
        J.Generate(prompt="Once upon a time in a land far away", max_tokens=48, ignore_eog=True),
        J.Generate(prompt="The quick brown fox jumps over", max_tokens=48, ignore_eog=True, mtp=J.Mtp.OFF),
    ]
    with engine_on(qwen_mmproj) as e:
        want = [e.submit(j).result().tokens for j in jobs]
    with engine_on(qwen_mmproj, parallel=3) as e:
        handles = [e.submit(j) for j in (jobs[1], jobs[2], jobs[0])]
        got = [h.result() for h in handles]
    assert [got[2].tokens, got[0].tokens, got[1].tokens] == want


def test_a_model_without_a_projector_refuses_a_picture_naming_what_to_get():
    with engine_on(None) as e:
        with pytest.raises(InvalidRequestError) as err:
            e.submit(gen(ask(image(1)))).result()
        # the engine goes on serving text
        assert len(e.submit(J.Generate(prompt="Hello", max_tokens=4, ignore_eog=True)).result().tokens) == 4
    msg = str(err.value)
    assert "without a projector" in msg and "mmproj" in msg and "--mmproj" in msg


def test_a_projector_made_for_another_model_is_refused_at_load(tmp_path):
    wrong = write_projector(tmp_path / "mmproj-wide.gguf", "qwen3vl_merger", 256)
    e = Engine(EngineConfig()).start()
    try:
        with pytest.raises(GGUFError) as err:
            e.submit(J.LoadModel(LoadSpec(DEMO, n_ctx=512, probe=False, fit="off", mmproj=wrong))).result()
        assert "256" in str(err.value) and "192" in str(err.value)
        assert e.models() == {}
    finally:
        e.stop()


def test_a_cancelled_picture_prompt_leaves_the_engine_serving(seeing):
    h = seeing.submit(gen(ask(image(4, 256, 192)), n=400))
    h.cancel()
    h.result()  # cancelling is not an error
    r = seeing.submit(gen(ask(image(1)), J.Mtp.OFF, n=8)).result()
    assert len(r.tokens) == 8


def test_exact_mode_is_bit_exact_with_mtp_through_a_picture(qwen_mmproj):
    """Exact mode (a child: it switches process-wide kernels): greedy MTP at depth 3 over
    a prompt with a picture gives plain decoding's tokens bit for bit."""
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run(
        [sys.executable, "-m", "tests.engine.runtime.exact_images_child", str(DEMO), str(qwen_mmproj)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["identity"].startswith("bit-exact")
    assert r["same"] == [True, True] and r["drafted"] > 0


def test_the_memory_check_counts_the_projector(qwen_mmproj):
    sizes = {}
    for mmproj in (None, qwen_mmproj):
        e = engine_on_checked(mmproj)
        try:
            (info,) = e.models().values()
            sizes[mmproj is not None] = info.memory
        finally:
            e.stop()
    assert sizes[True]["projector_bytes"] == 2 * qwen_mmproj.stat().st_size
    assert sizes[True]["total_bytes"] == sizes[False]["total_bytes"] + sizes[True]["projector_bytes"]


def engine_on_checked(mmproj: Path | None) -> Engine:
    e = Engine(EngineConfig()).start()
    e.submit(J.LoadModel(LoadSpec(DEMO, n_ctx=1024, probe=False, fit="check", mmproj=mmproj))).result()
    return e


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory) -> dict[str, str]:
    """Gemma 4 and its assistant (written in a child: laying out a model runs llama.cpp),
    with a gemma4v projector as wide as the model takes."""
    out = tmp_path_factory.mktemp("gemma4")
    code = (
        "import json, sys; from pathlib import Path; from tests.synth.families import write_all; "
        "print(json.dumps(write_all(Path(sys.argv[1]), ('gemma4',))['gemma4'].files))"
    )
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    files = json.loads(done.stdout.strip().splitlines()[-1])
    files["mmproj"] = str(write_projector(out / "mmproj-gemma4.gguf", "gemma4v", 128))
    return files


def test_gemma4_sees_through_a_non_causal_projector_and_its_assistant_drafts_after_the_picture(gemma4):
    """A second projector type (gemma4v: its rows decoded with non-causal attention, in
    one micro-batch) on Gemma 4, whose assistant reads the target's cache: MTP on equals
    off after the picture, and two pictures give two replies."""
    e = Engine(EngineConfig()).start()
    try:
        spec = LoadSpec(
            gemma4["target"], head=gemma4["head"], n_ctx=1024, probe=False, fit="off", mmproj=gemma4["mmproj"]
        )
        info = e.submit(J.LoadModel(spec)).result()
        assert info.drafting == "shared" and info.modalities == ("vision",)
        out = {}
        for seed in (1, 2):
            on = e.submit(gen(ask(image(seed)), draft_depth=2)).result()
            off = e.submit(gen(ask(image(seed)), J.Mtp.OFF)).result()
            assert on.tokens == off.tokens and on.stats.drafted > 0
            assert on.stats.prompt_tokens > 80  # the picture's 80 rows (gemma4v asks for at least 70)
            out[seed] = on.tokens
        assert out[1] != out[2]
    finally:
        e.stop()


def test_a_picture_longer_than_the_context_is_refused_in_words(qwen_mmproj):
    e = Engine(EngineConfig()).start()
    try:
        e.submit(J.LoadModel(LoadSpec(DEMO, n_ctx=256, probe=False, fit="off", mmproj=qwen_mmproj))).result()
        with pytest.raises(PromptTooLongError):
            e.submit(gen(ask(image(1, 512, 512)))).result()  # 1,024 rows
        assert len(e.submit(gen(ask(image(1)), n=4)).result().tokens) == 4
    finally:
        e.stop()


def test_the_prompt_cache_brings_a_picture_conversation_back_after_another(qwen_mmproj):
    """The demo is hybrid (recurrent layers roll back only a few tokens): a conversation
    with a picture, then another conversation, then the first one's next turn — the
    picture's rows come back from a snapshot, not decoded again, and the reply is the one
    decoded from scratch."""
    first = ask(image(5), "Describe it.")
    e = Engine(EngineConfig(prompt_cache_mb=64)).start()
    try:
        e.submit(J.LoadModel(LoadSpec(DEMO, n_ctx=1024, probe=False, fit="off", mmproj=qwen_mmproj))).result()
        r1 = e.submit(gen(first, n=16)).result()
        e.submit(gen(ask(image(6), "Something else entirely."), n=16)).result()
        second = [*first, {"role": "assistant", "content": r1.text}, {"role": "user", "content": "More?"}]
        r2 = e.submit(gen(second, n=16)).result()
    finally:
        e.stop()
    assert r2.stats.prompt_tokens_restored >= r1.stats.prompt_tokens - 1
    with engine_on(qwen_mmproj) as fresh:
        assert fresh.submit(gen(second, n=16)).result().tokens == r2.tokens


def test_a_next_turn_carrying_another_reply_resumes_after_the_picture(qwen_mmproj):
    """A client sends the next turn with a reply of its own (not the tokens generated): the
    contexts cannot roll back past the reply on the hybrid demo, so the turn resumes from
    the snapshot taken at the first prompt's end — the picture is not decoded again."""
    first = ask(image(8), "Describe it.")
    e = Engine(EngineConfig(prompt_cache_mb=64)).start()
    try:
        e.submit(J.LoadModel(LoadSpec(DEMO, n_ctx=1024, probe=False, fit="off", mmproj=qwen_mmproj))).result()
        r1 = e.submit(gen(first, n=24)).result()
        second = [*first, {"role": "assistant", "content": "I see a picture."}, {"role": "user", "content": "More?"}]
        r2 = e.submit(gen(second, n=8)).result()
    finally:
        e.stop()
    assert r2.stats.prompt_tokens_restored + r2.stats.prompt_tokens_reused >= r1.stats.prompt_tokens - 1


def test_libmtmd_runs_on_a_thread_that_ends_with_the_call(seeing, monkeypatch):
    """The encoder's CPU threads belong to the thread that calls it and cost CPU while it
    lives (an encode on the main thread slowed every later decode tenfold on 2 cores): a
    prompt's pictures are tokenized and encoded on a thread of their own, gone afterwards."""
    import threading

    from engine.runtime.media.projector import MARKER, Projector

    projector = _projector(seeing)
    seen: list[threading.Thread] = []
    real = Projector._prompt

    def spy(self, *args):
        seen.append(threading.current_thread())
        return real(self, *args)

    monkeypatch.setattr(Projector, "_prompt", spy)
    projector.prompt(MARKER, [image(9)])
    (t,) = seen
    assert t is not threading.current_thread() and not t.is_alive()


def _load(mmproj: Path):
    from engine.runtime.load.loader import load

    return load(LoadSpec(DEMO, n_ctx=1024, probe=False, fit="off", mmproj=mmproj))


def _picture_prompt(lm, seed: int) -> tuple[list[int], dict]:
    from engine.runtime.media.projector import MARKER

    text = f"<|im_start|>user\nLook: {MARKER}\nWhat is it?<|im_end|>\n<|im_start|>assistant\n"
    mp = lm.projector.prompt(text, [image(seed, 96, 64)])
    return lm.model.with_bos(mp.tokens), mp.chunks


def test_a_hybrid_state_is_never_rolled_back_over_a_picture(qwen_mmproj):
    """The demo's recurrent layers count a rollback in positions, and an M-RoPE picture's
    rows share one: contexts left at a picture's end (a cancel), then a prompt with another
    picture in its place, give the logits a fresh decode gives (rolling back over the
    picture left most of it in the state: logits 0.07 off)."""
    import numpy as np

    from engine.runtime.decode.prefill import prefill

    lm = _load(qwen_mmproj)
    try:
        s = lm.session
        first, first_media = _picture_prompt(lm, 1)
        other, other_media = _picture_prompt(lm, 2)
        fresh = prefill(s, other, speculative=False, cancel=None, media=other_media)
        s.reset()
        at = next(i for i, t in enumerate(first) if t < 0)
        s.decode_target(first[:at], logits="last", hidden=False)
        chunk = first_media[first[at]]
        s.decode_media(chunk, 0, chunk.n_tokens, logits="last", hidden=False)
        again = prefill(s, other, speculative=False, cancel=None, media=other_media)
        assert float(np.abs(again.logits - fresh.logits).max()) < 1e-4
    finally:
        lm.close()


@pytest.mark.parametrize("kind", ["qwen3vl_merger", "gemma4v"])
def test_prompt_cache_snapshots_are_taken_at_a_pictures_edge(kind, tmp_path):
    """A snapshot mark that falls inside a picture moves to its first row: a non-causal
    picture (decoded whole) no longer fails the request, and no snapshot splits a picture."""
    from engine.runtime.decode.cache.snapshotcache import SnapshotCache
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams

    lm = _load(write_projector(tmp_path / f"mmproj-{kind}.gguf", kind, 192))
    try:
        prompt, chunks = _picture_prompt(lm, 1)
        at = next(i for i, t in enumerate(prompt) if t < 0)
        cache = SnapshotCache(64 << 20, interval=at + 5)  # a mark 5 rows into the picture
        d = generate(lm.session, prompt, DecodeParams(max_tokens=8, ignore_eog=True, media=chunks), cache=cache)
        assert len(d.tokens) == 8
        ends = [e.n for e in cache.entries()]
        assert at in ends and not any(at < n < at + len(next(iter(chunks.values())).embd) for n in ends)
    finally:
        lm.close()


def test_a_damaged_second_picture_is_refused_and_the_first_one_freed(seeing):
    from engine.runtime.media.projector import MARKER
    from tests.synth.images import corrupt_png

    bad = Media("image", corrupt_png(32, 32), "image/png", 32, 32)
    with pytest.raises(InvalidRequestError, match="media 2"):
        _projector(seeing).prompt(f"{MARKER} and {MARKER}", [image(1), bad])
    assert sum(t < 0 for t in _projector(seeing).prompt(MARKER, [image(1)]).tokens) == 12


def test_suffix_drafts_and_a_grammar_work_after_a_picture(seeing):
    """Suffix drafts (from the conversation, never a picture's rows) and a grammar go on
    as with text: the reply follows the grammar, and MTP with suffix drafts emits plain
    greedy's tokens."""
    from engine.runtime.decode.grammar import GrammarSpec

    grammar = GrammarSpec("regex", r"(the |a )?[a-z]{2,10}( [a-z]{2,10}){3,12}")
    messages = ask(image(11), "Name what you see, in words.")
    on = seeing.submit(gen(messages, n=32, suffix_drafts=True, grammar=grammar)).result()
    off = seeing.submit(gen(messages, J.Mtp.OFF, n=32, suffix_drafts=False, grammar=grammar)).result()
    assert on.tokens == off.tokens
    assert re.fullmatch(r"(the |a )?[a-z]{2,10}( [a-z]{2,10}){3,12}", on.text)


def test_a_picture_prompt_decodes_as_libmtmd_itself_decodes_it(qwen_mmproj):
    """Rows and positions as llama.cpp lays them out: the demo's logits after a 192-row
    M-RoPE picture (it takes 16 positions) and the text after it equal, bit for bit, those
    of libmtmd's own helper (mtmd_helper_eval_chunks) on a plain context. (With the text
    resuming a position a row, the logits were 0.48 off.)"""
    import ctypes
    import threading

    import numpy as np

    from engine.runtime.decode.prefill import prefill
    from engine.runtime.llama.lib import llama, mtmd
    from engine.runtime.media.projector import MARKER

    lm = _load(qwen_mmproj)
    try:
        text = f"<|im_start|>user\nLook at this: {MARKER}\nWhat is it? Tell me.<|im_end|>\n<|im_start|>assistant\n"
        picture = image(3, 256, 192)
        mp = lm.projector.prompt(text, [picture])
        ours = prefill(lm.session, mp.tokens, speculative=False, cancel=None, media=mp.chunks).logits
        got: dict = {}

        def reference() -> None:  # on a thread that ends: its encoder threads end with it
            L, M = llama(), mtmd()
            params = L.llama_context_default_params()
            params.n_ctx, params.n_batch, params.n_ubatch = 1024, 512, 512
            ctx = L.llama_init_from_model(lm.model.ptr, params)
            chunks = M.mtmd_input_chunks_init()
            buf = (ctypes.c_uint8 * len(picture.data)).from_buffer_copy(picture.data)
            bitmap = M.mtmd_helper_bitmap_init_from_buf(lm.projector.ptr, buf, len(picture.data), False)
            try:
                data = text.encode()
                inp = M.mtmd_input_text(data, len(data), False, True)
                bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bitmap)
                assert M.mtmd_tokenize(lm.projector.ptr, chunks, ctypes.byref(inp), bitmaps, 1) == 0
                n_past = L.llama_pos(0)
                assert (
                    M.mtmd_helper_eval_chunks(lm.projector.ptr, ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)) == 0
                )
                got["positions"] = n_past.value
                row = L.llama_get_logits_ith(ctx, -1)
                got["logits"] = np.ctypeslib.as_array(row, shape=(lm.model.n_vocab,)).copy()
            finally:
                M.mtmd_input_chunks_free(chunks)
                M.mtmd_bitmap_free(bitmap)
                L.llama_free(ctx)

        t = threading.Thread(target=reference)
        t.start()
        t.join()
        assert got["positions"] == len(mp.tokens) - 192 + 16
        assert np.array_equal(got["logits"], ours)
    finally:
        lm.close()


def test_the_load_probe_runs_the_projector_in_a_child_first(qwen_mmproj, tmp_path, monkeypatch):
    """A projector is loaded, and a picture encoded and decoded with MTP, in the load
    probe's child before this process touches it: one that takes the child down (the
    test seam aborts it there) is a typed error, and the engine serves on."""
    import shutil

    from engine.errors import NativeCrashError
    from engine.runtime.load.loadcheck import CRASH_ENV, ProbeRequest, check_load

    model = shutil.copy(DEMO, tmp_path / "mine.gguf")  # a new file identity: nothing cached
    verdict = check_load(ProbeRequest(str(model), None, "integrated", -1, 4, mmproj=str(qwen_mmproj)))
    assert not verdict.cached and verdict.fallbacks == []
    monkeypatch.setenv(CRASH_ENV, "picture")
    with Engine(EngineConfig()) as e:
        with pytest.raises(NativeCrashError, match="aborted.*encoding and decoding a picture with the projector"):
            e.submit(J.LoadModel(LoadSpec(model, n_ctx=512, fit="off", mmproj=qwen_mmproj))).result(120)
        monkeypatch.delenv(CRASH_ENV)
        e.submit(J.LoadModel(LoadSpec(DEMO, n_ctx=512, probe=False, fit="off"))).result(60)
        assert len(e.submit(J.Generate(prompt="Hello", max_tokens=4, ignore_eog=True)).result(60).tokens) == 4
