"""Plain greedy decode speed, ours against llama-cpp-python's own ``Llama`` class
(``mtp-studio bench versus``).

Same file, threads, context and prompt (with BOS, as ``Llama.tokenize`` adds it); runs
alternate between the two so drift on a busy machine hits both. The figure is the decode
rate after the prompt: (N - 1) tokens over the time from the first generated token to
the last, for both (the first token comes from the prompt's logits in both). The token
streams are compared too: both are greedy over the same arithmetic, so they must agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.cli import EXIT_INVALID, die
from engine.errors import MtpStudioError
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.llama.lib import default_threads, llama
from engine.runtime.load.loader import LoadSpec, MtpSource, load

PROMPT = "Once upon a time, in a small village by the sea, there lived"


@dataclass
class VersusResult:
    model: str
    tokens: int
    threads: int
    ours: list[float] = field(default_factory=list)  # tokens/s per run
    theirs: list[float] = field(default_factory=list)
    same_tokens: bool = True

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.theirs)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "tokens": self.tokens,
            "threads": self.threads,
            "ours_tokens_per_second": statistics.median(self.ours),
            "llama_cpp_python_tokens_per_second": statistics.median(self.theirs),
            "ratio": self.ratio,
            "ours_runs": self.ours,
            "llama_cpp_python_runs": self.theirs,
            "same_tokens": self.same_tokens,
        }


def run_versus(
    model: str | Path,
    *,
    tokens: int = 128,
    runs: int = 5,
    n_ctx: int = 2048,
    threads: int | None = None,
    prompt: str = PROMPT,
) -> VersusResult:
    threads = threads or default_threads()
    llama()  # configure the environment and llama.cpp's log before the bindings' class loads
    from llama_cpp import Llama  # the reference being measured against

    lm = load(LoadSpec(model, mtp=MtpSource.OFF, n_ctx=n_ctx, n_threads=threads))
    # flash attention as llama.cpp resolves "auto" for our contexts on this build (the class
    # defaults to off, which is other arithmetic: near-tie tokens would differ)
    ref = Llama(
        str(model), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512, flash_attn=True, verbose=False
    )
    result = VersusResult(Path(model).name, tokens, threads)
    try:
        ids = lm.model.prompt_tokens(prompt)
        assert ref.tokenize(prompt.encode()) == ids, "both tokenize the prompt the same way (with BOS)"
        for i in range(runs + 1):  # the first round is a warm-up
            ours_tps, ours_tokens = _ours(lm, ids, tokens)
            theirs_tps, theirs_tokens = _theirs(ref, ids, tokens)
            if i:
                result.ours.append(ours_tps)
                result.theirs.append(theirs_tps)
            result.same_tokens &= ours_tokens == theirs_tokens
    finally:
        lm.close()
        ref.close()
    return result


def _ours(lm, ids: list[int], n: int) -> tuple[float, list[int]]:
    lm.session.reset()
    g = generate(lm.session, ids, DecodeParams(max_tokens=n, ignore_eog=True))
    return (len(g.tokens) - 1) / (g.stats.generation_ms / 1000), g.tokens


def _theirs(ref, ids: list[int], n: int) -> tuple[float, list[int]]:
    ref.reset()
    out: list[int] = []
    t0 = 0.0
    for tok in ref.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if not out:
            t0 = time.perf_counter()
        out.append(int(tok))
        if len(out) == n:
            break
    return (n - 1) / (time.perf_counter() - t0), out


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Plain greedy decode tokens/s: this engine vs llama-cpp-python's Llama class."
    )
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=5, help="measured runs of each (plus one warm-up)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.decoding.versus_llama_cpp_python") -> int:
    args = parser(prog).parse_args(argv)
    try:
        r = run_versus(args.model, tokens=args.tokens, runs=args.runs, n_ctx=args.ctx, threads=args.threads)
    except MtpStudioError as e:
        return die(str(e), EXIT_INVALID)
    body = r.to_json()
    if args.json:
        print(json.dumps(body))
    else:
        print(
            f"{body['model']}: {args.tokens} tokens, {r.threads} threads, median of {args.runs}: "
            f"ours {body['ours_tokens_per_second']:.1f} tok/s, llama-cpp-python "
            f"{body['llama_cpp_python_tokens_per_second']:.1f} "
            f"tok/s, ratio {r.ratio:.3f}, same tokens: {'yes' if r.same_tokens else 'NO'}"
        )
    return 0 if r.same_tokens else EXIT_INVALID


if __name__ == "__main__":
    raise SystemExit(main())
