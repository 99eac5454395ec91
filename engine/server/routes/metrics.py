"""GET /metrics: Prometheus text format."""

from __future__ import annotations

from collections.abc import Callable
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from engine.runtime.slots.pool import SlotInfo


def _line(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> list[str]:
    out = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    # whole numbers in full (``:g`` would round a byte count to 6 digits)
    out += [f"{name}{labels} {value if isinstance(value, int) else format(value, 'g')}" for labels, value in samples]
    return out


async def metrics(request: Request):
    st = request.app.state
    c = st.engine.totals()
    drafted, accepted = c.drafted, c.accepted
    lines: list[str] = []
    lines += _line(
        "mtp_requests_total",
        "counter",
        "HTTP requests by route and status.",
        [(f'{{route="{r}",status="{s}"}}', n) for (r, s), n in sorted(st.requests.items())] or [("", 0)],
    )
    lines += _line("mtp_prompt_tokens_total", "counter", "Prompt tokens processed.", [("", c.prompt_tokens)])
    lines += _line("mtp_generated_tokens_total", "counter", "Tokens generated.", [("", c.generated_tokens)])
    lines += _line("mtp_draft_tokens_total", "counter", "Tokens drafted by the MTP head.", [("", drafted)])
    lines += _line("mtp_draft_accepted_total", "counter", "Drafted tokens the target accepted.", [("", accepted)])
    lines += _line(
        "mtp_acceptance_ratio",
        "gauge",
        "Accepted / drafted since start.",
        [("", accepted / drafted if drafted else 0.0)],
    )
    pc = st.engine.prompt_cache_info()
    lines += _line(
        "mtp_prompt_cache_requests_total",
        "counter",
        "Prompts by where they resumed: a snapshot (hit), the live context, or nothing (miss).",
        [('{result="hit"}', pc.hits), ('{result="live"}', pc.live), ('{result="miss"}', pc.misses)],
    )
    lines += _line(
        "mtp_prompt_cache_restored_tokens_total",
        "counter",
        "Prompt tokens restored from snapshots.",
        [("", pc.restored_tokens)],
    )
    lines += _line(
        "mtp_prompt_cache_evictions_total",
        "counter",
        "Snapshots evicted to stay within the budget.",
        [("", pc.evicted)],
    )
    lines += _line("mtp_prompt_cache_entries", "gauge", "Snapshots held.", [("", pc.entries)])
    lines += _line("mtp_prompt_cache_bytes", "gauge", "Host memory the snapshots take.", [("", pc.bytes)])
    lines += _line(
        "mtp_prompt_cache_budget_bytes", "gauge", "The snapshots' memory budget (0: off).", [("", pc.budget_bytes)]
    )
    lines += _line("mtp_queue_depth", "gauge", "Engine jobs running or waiting.", [("", st.engine.queue_depth)])
    slots = [(m, x) for m, per in st.engine.slots().items() for x in per]

    def per_slot(figure: Callable[[SlotInfo], float]) -> list[tuple[str, float]]:
        return [(f'{{model="{m}",slot="{x.slot}"}}', float(figure(x))) for m, x in slots] or [("", 0)]

    lines += _line("mtp_slots", "gauge", "Slots of the loaded models (requests decoded together).", [("", len(slots))])
    lines += _line("mtp_slots_busy", "gauge", "Slots decoding a request now.", [("", sum(x.busy for _, x in slots))])
    lines += _line(
        "mtp_slots_tokens_per_second",
        "gauge",
        "Tokens per second of every busy slot together.",
        [("", sum(x.tokens_per_second for _, x in slots))],
    )
    lines += _line(
        "mtp_slot_busy",
        "gauge",
        "1 while the slot decodes a request.",
        per_slot(lambda x: x.busy),
    )
    lines += _line(
        "mtp_slot_tokens_per_second",
        "gauge",
        "The slot's request: tokens per second so far.",
        per_slot(lambda x: x.tokens_per_second),
    )
    lines += _line(
        "mtp_slot_draft_depth", "gauge", "The slot's draft depth in its last round.", per_slot(lambda x: x.depth)
    )
    steps = [
        (f'{{model="{m}",sequences="{n}"}}', float(d))
        for m, per in st.engine.step_depths().items()
        for n, d in per.items()
    ]
    lines += _line(
        "mtp_step_draft_depth",
        "gauge",
        "MTP auto's draft depth for the last step of this many sequences decoding together.",
        steps or [("", 0)],
    )
    lines += _line(
        "mtp_slot_requests_total", "counter", "Requests the slot has decoded.", per_slot(lambda x: x.requests)
    )
    lines += _line(
        "mtp_slot_tokens_total", "counter", "Tokens the slot has generated.", per_slot(lambda x: x.tokens_total)
    )
    lines += _line(
        "mtp_requests_in_flight", "gauge", "Endpoint requests admitted and not finished.", [("", st.pending)]
    )
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


routes = [Route("/metrics", metrics, methods=["GET"])]
