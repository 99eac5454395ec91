"""What grammar-constrained output costs and saves: schema-constrained generation against
unconstrained, plain against MTP (fixed depths and auto), on a model of your choice
(default: the bundled demo). Prints figures; not a test.

Per arm and schema: tokens/s (median over alternating rounds), the share of tokens the
grammar forced (chosen by no model), target forwards per token, and the time llguidance
takes per mask (median and p99 over every masked row).

    python -m benchmarks.decoding.structured [--model PATH] [--rounds 5] [--tokens 160]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

SCHEMAS = {
    "key-heavy": {
        "type": "object",
        "properties": {
            f"customer_{w}_field": {"type": "boolean"}
            for w in ("name", "email", "phone", "address", "city", "country", "postcode", "notes")
        },
        "required": [
            f"customer_{w}_field" for w in ("name", "email", "phone", "address", "city", "country", "postcode", "notes")
        ],
        "additionalProperties": False,
    },
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": False,
    },
}
ARMS = ("plain", "1", "3", "auto")
PROMPT = "<|im_start|>user\nDescribe a customer record as JSON.<|im_end|>\n<|im_start|>assistant\n"


def main(argv: list[str] | None = None) -> int:
    from engine.runtime.decode import grammar as G
    from engine.runtime.decode.policy.adaptive import AdaptiveDepth
    from engine.runtime.decode.loop import generate
    from engine.runtime.decode.params import DecodeParams
    from engine.runtime.decode.policy.base import FixedDepth
    from engine.runtime.llama.vocab import grammar_tokenizer
    from engine.runtime.load.loader import LoadSpec, MtpSource, load
    from engine.synth.demo import demo_model_path

    ap = argparse.ArgumentParser(prog="python -m benchmarks.decoding.structured")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    path = a.model or demo_model_path()
    lm = load(LoadSpec(path, mtp=MtpSource.AUTO, n_ctx=2048, max_draft_depth=4))
    prompt = lm.model.prompt_tokens(PROMPT)
    tok = grammar_tokenizer(lm.model, lm.template.end_tokens)
    mask_s: list[float] = []
    real_allowed = G.Constraint.allowed

    def timed_allowed(self):
        t = time.perf_counter()
        try:
            return real_allowed(self)
        finally:
            mask_s.append(time.perf_counter() - t)

    G.Constraint.allowed = timed_allowed  # type: ignore[method-assign]
    auto = AdaptiveDepth(4)
    results: dict = {}
    for schema_name in (None, *SCHEMAS):
        spec = G.GrammarSpec.json_schema(SCHEMAS[schema_name]) if schema_name else None
        grammar = G.compile_grammar(spec) if spec else None
        rows: dict[str, dict[str, list[float]]] = {arm: {"tps": [], "forced": [], "fpt": []} for arm in ARMS}
        for r in range(a.rounds + 1):  # round 0 warms up
            for arm in ARMS if r % 2 == 0 else reversed(ARMS):
                depth = None if arm == "plain" else auto if arm == "auto" else FixedDepth(int(arm))
                c = G.Constraint(tok, grammar, lm.model.n_vocab) if grammar else None
                g = generate(
                    lm.session,
                    prompt,
                    DecodeParams(
                        max_tokens=a.tokens,
                        depth=depth,
                        constraint=c,
                        ignore_eog=c is None,
                        end_tokens=lm.template.end_tokens,
                    ),
                )
                if r == 0:
                    continue
                s = g.stats
                rows[arm]["tps"].append(s.tokens_per_second)
                rows[arm]["forced"].append(s.forced / max(s.generated, 1))
                rows[arm]["fpt"].append(s.target_forwards / max(s.generated, 1))
        results[schema_name or "unconstrained"] = {
            arm: {k: statistics.median(v) for k, v in m.items()} for arm, m in rows.items()
        }
    lm.close()
    mask_s.sort()
    summary = {
        "model": str(path),
        "arms": results,
        "mask_ms_median": 1000 * statistics.median(mask_s) if mask_s else 0.0,
        "mask_ms_p99": 1000 * mask_s[int(0.99 * (len(mask_s) - 1))] if mask_s else 0.0,
        "masks": len(mask_s),
    }
    if a.json:
        print(json.dumps(summary))
        return 0
    print(
        f"model {path}; mask time per row: median {summary['mask_ms_median']:.3f} ms, p99 "
        f"{summary['mask_ms_p99']:.3f} ms "
        f"over {len(mask_s)} masks"
    )
    base = results["unconstrained"]
    print(f"{'schema':<14}{'arm':<6}{'tok/s':>9}{'vs unconstrained':>18}{'forced':>8}{'fwd/tok':>9}")
    for name, arms in results.items():
        for arm, m in arms.items():
            rel = m["tps"] / base[arm]["tps"] if base[arm]["tps"] else 0.0
            print(f"{name:<14}{arm:<6}{m['tps']:>9.0f}{rel:>17.2f}x{m['forced']:>8.0%}{m['fpt']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
