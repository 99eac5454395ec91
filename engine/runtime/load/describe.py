"""What a load made of a model, in words and figures every other layer reads
(:class:`~engine.runtime.modelinfo.ModelInfo`): the last stage of :func:`engine.runtime.load.loader.load`."""

from __future__ import annotations

from pathlib import Path

from engine.gguf.filetype import largest_tensor_type, quantization
from engine.gguf.shards import ModelSet
from engine.runtime.llama import exact as exact_mod
from engine.runtime.llama import repack
from engine.runtime.llama.lib import system_info
from engine.runtime.load.source import MtpSource
from engine.runtime.modelinfo import CHAT, EMBEDDING, RERANK, ModelInfo
from engine.runtime.pooled import POOLING
from engine.runtime.prompt.calls import GENERIC
from engine.runtime.prompt.templates import ChatTemplate


def describe(c, p, b, template: ChatTemplate) -> ModelInfo:
    """What the load made of the model, for every other layer, from its stages' results
    (the loader's checked files, plan and built contexts)."""
    spec, source, model, pooling, thinking = p.spec, c.source, b.model, c.pooling, template.thinking
    quant = _quant_name(c.target)
    return ModelInfo(
        name=spec.name or Path(spec.path).name.removesuffix(".gguf"),
        path=str(spec.path),
        kind=CHAT if pooling is None else RERANK if pooling == 4 else EMBEDDING,
        head=str(spec.head) if source == MtpSource.EXTERNAL else None,
        architecture=c.facts.architecture,
        description=model.description,
        n_ctx=b.session.n_ctx,
        pooling=POOLING[pooling] if pooling is not None else None,
        parallel=len(b.pool) if b.pool is not None else 1,
        parallel_requested=c.spec.parallel,
        n_ctx_train=model.n_ctx_train,
        n_vocab=model.n_vocab,
        n_embd=model.n_embd,
        nextn_layers=c.facts.nextn_layers,
        mtp=source.value,
        drafting=c.mode,
        depth_limit=c.heads if c.mode == "chain" else None,
        max_draft_depth=spec.max_draft_depth,
        quantization=quant,
        add_bos=model.add_bos,
        chat_template=template.describe(),
        thinks=thinking is not None,
        think_toggle=thinking is not None and thinking.toggle,
        tool_format=template.calls.format.name if template.calls is not None else GENERIC.name,
        extra_bufts=p.extra_bufts,
        repack_notice=repack.verdict().notice,
        fallbacks=tuple(p.verdict.fallbacks),
        mtp_off_reason=c.mtp_off,
        fallbacks_found_now=bool(p.verdict.fallbacks) and not p.verdict.cached,
        exact=spec.exact,
        identity=_identity_claim(spec.exact, quant, source),
        rpc=tuple(str(e) for e in c.endpoints),
        placement=p.placement.to_json() if p.placement is not None else None,
        n_ctx_requested=c.spec.n_ctx,
        fit=p.fit_report.to_json() if p.fit_report is not None else None,
        memory=p.fit_report.estimate.to_json() if p.fit_report is not None else None,
    )


def _identity_claim(exact: bool, quant: str | None, source: MtpSource) -> str:
    if source == MtpSource.OFF:
        return "no speculation"
    if not exact:
        return "argmax of each verify batch (may differ from one-at-a-time decoding at near-ties)"
    float_weights = quant in exact_mod.FLOAT_WEIGHTS
    if float_weights and exact_mod.build_uses_llamafile(system_info()):
        return (
            "argmax of each verify batch: this model's F16/F32 weights go through llamafile's sgemm in this build; "
            "the exact CPU build (`backend build --exact`) makes it bit-exact"
        )
    return "bit-exact: identical to one-token-at-a-time greedy decoding"


def _quant_name(ms: ModelSet) -> str | None:
    """The file's quantization, by the rule inspect and the library use."""
    return quantization(ms.first, largest_tensor_type(ms))[0]
