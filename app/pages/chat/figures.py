"""The chat page's figures line: speed, acceptance, depth and how the prompt came in;
and the context a load chose."""

from __future__ import annotations

from engine.facade import GenerationStats, ModelInfo


def figures_line(stats: GenerationStats | None, live_tps: float | None = None, mtp: str = "") -> str:
    if stats is None and live_tps is None:
        return "ready"
    tps = live_tps if live_tps is not None else stats.tokens_per_second
    parts = [f"{tps:6.1f} tok/s"]
    if stats is not None and stats.drafted:
        parts.append(f"acceptance {stats.acceptance:.2f}")
        parts.append(f"mean accepted {stats.mean_accept_len:.2f}")
    if stats is not None and stats.forced:
        parts.append(f"{stats.forced} forced (free)")
    if stats is not None and stats.thinking_tokens:
        think = f"thinking {stats.thinking_tokens} tok"
        if stats.thinking_drafted:
            think += f" (acceptance {stats.thinking_accepted / stats.thinking_drafted:.2f})"
        parts.append(think)
    if stats is not None and stats.sampled:
        parts.append("sampled drafts" if stats.sampled_draft else "sampled")
    if stats is not None:
        parts.append(f"depth {stats.depth_json}")
    if mtp:
        parts.append(f"MTP {mtp}")
    line = "  ·  ".join(parts)
    if stats is not None and stats.prompt_tokens:
        line += "\n" + prompt_line(stats)
    return line


def prompt_line(stats: GenerationStats) -> str:
    """How the prompt was brought in: tokens reused (and restored from the prompt cache),
    tokens decoded, and the time it took."""
    new = stats.prompt_tokens - stats.prompt_tokens_reused
    line = f"prompt {stats.prompt_tokens} tok: {stats.prompt_tokens_reused} cached"
    if stats.prompt_tokens_restored:
        line += f" ({stats.prompt_tokens_restored} restored)"
    return line + f", {new} decoded in {stats.prompt_ms:.0f} ms"


def context_line(info: ModelInfo) -> str:
    """The context a load chose and why: "context 4096 (fits up to 100864)", or "context
    lowered to 2048 to fit memory (asked for 4096)"."""
    n_ctx = info.n_ctx
    if info.max_ctx_fits is None:  # the memory check was off (Load anyway) or did not apply (RPC devices)
        return f"context {n_ctx}"
    if info.context_lowered:
        return f"context lowered to {n_ctx} to fit memory (asked for {info.n_ctx_requested})"
    if 0 < info.n_ctx_train <= n_ctx:
        return f"context {n_ctx} (the model's longest; it fits)"
    return f"context {n_ctx} (fits up to {info.max_ctx_fits})"
