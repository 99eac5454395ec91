"""One generation on a model in this process: a resolved :class:`~engine.runtime.jobs.Generate`
met with its model, decoded, its events emitted, and what it leaves behind kept (the
conversation's tokens, what auto learned). Preparing (:func:`~engine.runtime.decider.prepare`)
and choosing a slot (:func:`prepare_in_slot`) may run on any thread; decoding runs on the engine
thread (a slot's, in a sequence of its batcher's steps).
"""

from __future__ import annotations

from dataclasses import replace

from engine.runtime import jobs as J
from engine.runtime.decode.loop import generate
from engine.runtime.decode.policy.store import save_policy
from engine.runtime.decode.stopping import StopReason
from engine.runtime.handle import JobHandle
from engine.runtime.load.loader import LoadedModel
from engine.runtime.prompt.tokenized import TokenizedTexts
from engine.runtime.decider import Prepared, prepare
from engine.runtime.slots.pool import Reservation, Slot


def prepare_in_slot(
    job: J.Generate, lm: LoadedModel, texts: TokenizedTexts, reservation: Reservation
) -> tuple[Prepared, Slot]:
    """Prepare ``job`` (render, tokenize: any thread) and take the slot its prompt suits;
    with MTP auto its depth policy is then the step's, per batch size
    (engine.runtime.decode.policy.steps)."""
    prep = prepare(job, lm, texts)
    slot = reservation.bind(prep.prompt)
    if prep.params.depth is not None:
        depth = reservation.pool.depth_policy(slot, prep.params.depth)
        prep = replace(prep, params=replace(prep.params, depth=depth))
    return prep, slot


def decode_prepared(
    job: J.Generate, prep: Prepared, lm: LoadedModel, texts: TokenizedTexts, h: JobHandle, slot: Slot
) -> J.GenerateResult:
    """Decode a prepared generation on ``slot``'s session (one of the model's slots, in the
    steps of its batcher: a model loaded with one slot too), emitting to ``h``, and keep
    what it leaves behind (the conversation's tokens, what auto learned)."""
    session = slot.session
    session.phase_hook = job.phase_hook
    parser = prep.reply.parser() if prep.reply is not None else None

    def emit(toks: list[int], text: str, lps, parts) -> None:
        h._emit(
            J.Tokens(tuple(toks), text, None if lps is None else tuple(lps), None if parts is None else tuple(parts))
        )

    def on_round(r) -> None:
        slot.record(r)
        if h.wants_rounds:
            h._emit(J.Round(r))

    try:
        g = generate(
            session,
            prep.prompt,
            prep.params,
            cancel=h.cancel_event,
            on_emit=emit,
            on_round=on_round,
            cache=lm.snapshots,
            splitter=parser,
            outputs=lm.outputs,
        )
        if parser is not None:
            # only a reply cut by its length leaves a call's arguments as they were written
            rest = parser.finish(cut=g.stop_reason in (StopReason.MAX_TOKENS, StopReason.CONTEXT_FULL))
            if rest:
                h._emit(J.Tokens((), "", None, tuple(rest)))
    finally:
        session.phase_hook = None
        if prep.learns:
            save_policy(lm.auto_policy_path, lm.auto_policy)
    if prep.prompt_text is not None:
        reply_bytes = b"".join(lm.model.piece(t) for t in g.tokens)
        texts.remember(prep.prompt_text, prep.prompt, reply_bytes.decode("utf-8", "replace"), g.tokens)
    return J.GenerateResult(
        g.tokens, g.text, g.stats, lm.name, len(prep.prompt), g.logprobs, parser.reply if parser is not None else None
    )


def count_prompt(job: J.Generate, state, cancel, emit) -> int:
    """The prompt tokens the resolved ``job`` would decode (a :class:`~engine.runtime.jobs.Call`
    function: ``state`` is the engine's; picklable with the job, so it runs where the model
    does, a worker process included)."""
    lm = state.get(job.model)
    return len(prepare(job, lm, state.texts_of(lm.name), encode=False).prompt)  # pictures counted, not encoded
