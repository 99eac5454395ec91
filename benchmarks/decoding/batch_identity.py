"""Is a row's result independent of its batch, on one model? Logit noise, argmax flips, MTP
against plain (``mtp-studio bench identity``; the table across models and builds in
docs/mtp.md: :mod:`benchmarks.decoding.identity`).

* **widths**: decode N greedy tokens one at a time (the reference), then the same tokens
  again in chunks of width 2..W (as verify batches are): max |logit difference| and argmax
  flips, with the reference's top-2 margin at each flip
  (:mod:`engine.runtime.measure.batchnoise`, which the self-test uses too);
* **mtp**: where the model has MTP, generate with it at each depth and compare with plain
  greedy: identical or not, and the margin at the first divergence;
* **prefill split**: the prompt's last row when the prompt is decoded whole and as a reused
  prefix plus the rest.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.cli import EXIT_INVALID, die
from engine.errors import InvalidSettingError, MtpStudioError
from engine.runtime.decode.loop import generate
from engine.runtime.decode.params import DecodeParams
from engine.runtime.decode.policy.base import FixedDepth
from engine.runtime.llama import exact
from engine.runtime.load.loader import LoadedModel, LoadSpec, MtpSource, load
from engine.runtime.measure.batchnoise import WidthReport, reference, replay, top2_margin


@dataclass
class MtpReport:
    depth: int
    tokens: int
    identical: bool
    first_divergence: int | None = None
    margin_at_divergence: float | None = None


@dataclass
class IdentityReport:
    model: str
    tokens: int
    widths: list[WidthReport]
    mtp: list[MtpReport]
    #: the prompt's last row when the prompt is decoded in one call vs in two (a reused
    #: prefix): max |logit difference|
    prefill_split_diff: float = 0.0

    @property
    def noise(self) -> float:
        """Largest logit difference seen between a row alone and in a batch."""
        return max((w.max_abs_diff for w in self.widths), default=0.0)

    @property
    def exact(self) -> bool:
        return self.noise == 0.0 and self.prefill_split_diff == 0.0 and all(m.identical for m in self.mtp)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "tokens": self.tokens,
            "noise": self.noise,
            "prefill_split_diff": self.prefill_split_diff,
            "exact": self.exact,
            "widths": [
                {k: v for k, v in asdict(w).items() if k != "batch_tokens"} | {"flips_per_1000": w.flips_per_1000}
                for w in self.widths
            ],
            "mtp": [asdict(m) for m in self.mtp],
        }


def mtp_runs(
    lm: LoadedModel, prompt: list[int], tokens: list[int], ref: np.ndarray, depths: list[int]
) -> list[MtpReport]:
    out = []
    for k in depths:
        lm.session.reset()
        g = generate(lm.session, prompt, DecodeParams(max_tokens=len(tokens), depth=FixedDepth(k), ignore_eog=True))
        lm.session.reset()
        first = next((i for i, (a, b) in enumerate(zip(g.tokens, tokens)) if a != b), None)
        if first is None and len(g.tokens) != len(tokens):
            first = min(len(g.tokens), len(tokens))
        margin = top2_margin(ref[first]) if first is not None and first < len(ref) else None
        out.append(MtpReport(k, len(g.tokens), first is None, first, margin))
    return out


def measure(
    lm: LoadedModel, prompt: list[int], *, tokens: int = 128, max_width: int = 8, depths: list[int] | None = None
) -> IdentityReport:
    rows = lm.session.target.n_outputs
    if max_width > rows:
        raise InvalidSettingError(
            f"This model was loaded for batches of at most {rows} logit rows; use --max-width {rows} or less "
            f"(or load it with a deeper --max-depth: rows = depth + 1)."
        )
    seq, ref = reference(lm, prompt, tokens)
    widths = [replay(lm, prompt, seq, ref, w) for w in range(2, max_width + 1)]
    mtp = []
    if lm.session.draft is not None:
        mtp = mtp_runs(lm, prompt, seq, ref, depths or [1, 2, 3])
    return IdentityReport(lm.name, tokens, widths, mtp, prefill_split(lm, prompt))


def prefill_split(lm: LoadedModel, prompt: list[int]) -> float:
    """Decode ``prompt`` in one call, then as two parts (as a reused prefix is); the max
    |difference| of the last row's logits."""
    s = lm.session
    rows = []
    for cut in (0, len(prompt) // 2):
        s.decode_tokens(prompt[:cut], want_logits=False, fresh=True)
        s.decode_tokens(prompt[cut:], want_logits=True)
        rows.append(s.target.logits(-1).copy())
    s.reset()
    return float(np.max(np.abs(rows[0] - rows[1])))


# ------------------------------------------------------------------ the command
def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Decode N greedy tokens one at a time, then again in batches of 2..W rows (as speculative "
        "verify batches are): max |logit difference|, argmax flips with the one-at-a-time top-2 margin at each, "
        "and, where the model has MTP, whether MTP output at each depth equals plain greedy output.",
    )
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--head", type=Path, help="separate MTP head GGUF")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--max-width", type=int, default=8, help="widest batch replayed (default 8: verify at depth 7)")
    p.add_argument("--depths", default="1,2,3", help="MTP depths compared with plain greedy")
    p.add_argument("--prompt", default="Once upon a time, in a small village by the sea, there lived")
    p.add_argument("--prompt-repeat", type=int, default=1, help="repeat the prompt (long-context checks)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--exact", action="store_true", help="measure in exact mode")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, prog: str = "benchmarks.decoding.batch_identity") -> int:
    args = parser(prog).parse_args(argv)
    if args.exact:
        exact.request()
    try:
        depths = [int(x) for x in args.depths.split(",") if x.strip()]
        lm = load(
            LoadSpec(
                args.model,
                head=args.head,
                mtp=MtpSource.AUTO,
                n_ctx=args.ctx,
                max_draft_depth=max(depths + [1]),
                exact=args.exact,
            )
        )
    except (MtpStudioError, ValueError) as e:
        return die(str(e), EXIT_INVALID)
    try:
        prompt = lm.model.prompt_tokens(" ".join([args.prompt] * args.prompt_repeat))
        r = measure(lm, prompt, tokens=args.tokens, max_width=args.max_width, depths=depths)
        body = dict(r.to_json(), prompt_tokens=len(prompt), exact_mode=args.exact, identity=lm.info.identity)
    finally:
        lm.close()
    if args.json:
        print(json.dumps(body))
        return 0
    _print(body, args.tokens, len(prompt), args.exact)
    return 0


def _print(body: dict, tokens: int, prompt_tokens: int, exact_mode: bool) -> None:
    print(
        f"{body['model']}: {tokens} greedy tokens after a {prompt_tokens}-token prompt, exact mode "
        f"{'on' if exact_mode else 'off'}"
    )
    print(f"{'width':>6} {'max |dlogit|':>13} {'flips':>6} {'per 1000':>9}  margins at flips")
    for w in body["widths"]:
        margins = ", ".join(f"{m:.3f}" for m in w["flip_margins"]) or "-"
        print(f"{w['width']:>6} {w['max_abs_diff']:13.4f} {w['flips']:>6} {w['flips_per_1000']:9.1f}  {margins}")
    for m in body["mtp"]:
        what = (
            "identical"
            if m["identical"]
            else (f"differs from token {m['first_divergence']} (plain top-2 margin {m['margin_at_divergence']:.4f})")
        )
        print(f"MTP depth {m['depth']}: {what}")
    print(f"prompt decoded whole vs in two parts: last row differs by {body['prefill_split_diff']:.4f}")
    print(
        f"noise bound {body['noise']:.4f}; {'bit-exact' if body['exact'] else 'not batch-invariant'} here; "
        f"load: {body['identity']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
