"""PNG plot of an A/B benchmark (matplotlib, an optional dependency: ``[plot]``)."""

from __future__ import annotations

from pathlib import Path

from engine.errors import InvalidRequestError


def plot(body: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidRequestError("--plot needs matplotlib: pip install 'mtp-studio[plot]'") from None
    arms = body["arms"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    names = [a["depth"] for a in arms]
    med = [a["tokens_per_second_median"] for a in arms]
    lo = [a["tokens_per_second_median"] - a["tokens_per_second_min"] for a in arms]
    hi = [a["tokens_per_second_max"] - a["tokens_per_second_median"] for a in arms]
    colors = ["#8a8f98" if n == "0" else "#2f7fd8" if n != "auto" else "#e07b39" for n in names]
    ax1.bar(names, med, yerr=[lo, hi], capsize=4, color=colors)
    for i, a in enumerate(arms):
        ax1.text(i, med[i] + hi[i], f"{a['speedup']:.2f}x", ha="center", va="bottom", fontsize=8)
    ax1.set_xlabel("draft depth (0 = plain greedy)")
    ax1.set_ylabel("tokens/s (median, min-max)")
    ax1.set_title("Throughput by arm")
    for a in arms:
        pos = a["acceptance_by_position"]
        if pos:
            ax2.plot(range(1, len(pos) + 1), pos, marker="o", label=f"depth {a['depth']}")
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("draft position")
    ax2.set_ylabel("acceptance")
    ax2.set_title("Acceptance by draft position")
    if any(a["acceptance_by_position"] for a in arms):
        ax2.legend(fontsize=8)
    fig.suptitle(
        f"{Path(body['model']).name}: {body['max_tokens']} tokens x {body['prompts']} prompts x {body['runs']} runs"
    )
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
