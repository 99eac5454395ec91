"""Loading a target model (and its MTP head, and its projector) safely, with the MTP source resolved.

Order matters because llama.cpp can abort the process: the settings are checked against
what llama.cpp asserts on (:mod:`engine.runtime.limits`), every file is validated
structurally (:mod:`engine.gguf.validate`), a head and a projector are checked against
their target from the headers alone, the combination is loaded and decoded once in a
child process (:mod:`engine.runtime.load.loadcheck`, cached), and only then does this
process call llama.cpp, with whatever fallback the child needed. :func:`load`: ``_check``
(settings, headers, the MTP source) → ``_plan`` (memory, placement, the probe) → ``_build``
(the llama.cpp objects, closed again if anything fails) → ``describe`` (the frozen
:class:`~engine.runtime.modelinfo.ModelInfo`); the projector last (engine.runtime.media.attach).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import (
    GGUFError,
    HeadMismatchError,
    InsufficientMemoryError,
    InvalidSettingError,
    ModelLoadError,
    ModelNotFoundError,
    MtpUnavailableError,
)
from engine.gguf.memory import ModelShape
from engine.gguf.pairing import Summary, check_pair
from engine.gguf.shards import ModelSet
from engine.gguf.families import MtpFamily, family
from engine.gguf.validate import MtpFacts, nextn_missing_problem, validate_path
from engine.runtime.load.source import (
    MtpSource,
    mtp_problem,
    nextn_load_failure,
    pooling_of_file,
    resolve_source,
)
from engine.rpc.endpoints import parse_endpoints
from engine.runtime.llama import exact as exact_mod
from engine.runtime.llama import repack
from engine.runtime import limits
from engine.runtime.load import fit, rpcdevices
from engine.runtime.load.contexts import make_contexts
from engine.runtime.media.attach import attach_projector, check_projector, projector_size
from engine.runtime.media.projector import Projector
from engine.runtime.load.describe import describe
from engine.runtime.load.placement import LlamaParams, LocalOnly, Placement, plan_placement
from engine.runtime.llama.context import Context
from engine.runtime.load.loadcheck import LoadVerdict, ProbeRequest, check_load
from engine.runtime.llama.model import Model
from engine.runtime.modelinfo import ModelInfo
from engine.runtime.decode.policy.adaptive import AdaptiveDepth
from engine.runtime.decode.policy.store import load_policy, policy_path
from engine.runtime.decode.session import Session
from engine.runtime.decode.cache.snapshotcache import SnapshotCache
from engine.runtime.decode.drafting.suffix import OutputStore
from engine.runtime.slots.pool import SlotPool
from engine.runtime.prompt.templates import ChatTemplate, resolve_template


@dataclass(frozen=True)
class LoadSpec:
    path: str | Path
    head: str | Path | None = None
    mtp: MtpSource = MtpSource.AUTO
    n_ctx: int = 4096
    n_batch: int = 512
    #: deepest draft the contexts are sized for (recurrent rollback snapshots)
    max_draft_depth: int = 4
    n_gpu_layers: int = -1
    n_threads: int | None = None
    #: load and decode the combination in a child process first (cached per files,
    #: build and settings); off only inside that child and in tools that are children
    probe: bool = True
    name: str | None = None
    #: llama.cpp's CPU weight repacking (extra buffer types); None: as the probe found, or
    #: without a probe as this machine's verdict says (engine.runtime.llama.repack)
    extra_bufts: bool | None = None
    #: batch-invariant arithmetic (engine.runtime.llama.exact): MTP output bit-identical to
    #: one-token-at-a-time decoding, at a cost in speed
    exact: bool = False
    #: RPC servers (``host:port``) whose devices take part of the trunk's layers; such a
    #: model runs in a worker process (engine.runtime.worker)
    rpc: tuple[str, ...] = ()
    #: a Jinja chat template used instead of the file's own (None: the file's)
    chat_template: str | None = None
    #: one weight per device (remote ones in endpoint order, then this machine's), or
    #: None: by free memory
    tensor_split: tuple[float, ...] | None = None
    #: the memory check before anything is allocated (engine.runtime.load.fit): "check"
    #: refuses a load whose estimate exceeds free memory, "shrink" lowers the context to
    #: the largest that fits first, "off" is the user's explicit override
    fit: str = "check"
    #: logit rows one target decode may read (llama.cpp's n_outputs_max); None: what
    #: decoding reads (engine.gguf.memory.logit_rows). Tools that read a whole batch's logits raise it.
    logit_rows: int | None = None
    #: sequences decoded together (engine.runtime.slots): each has a KV stream of
    #: ``n_ctx`` cells; 1: one at a time. The memory check lowers it to what fits.
    parallel: int = 1
    #: a projector (``mmproj-*.gguf``) for the model's pictures (and audio); None: text only
    mmproj: str | Path | None = None


@dataclass
class LoadedModel:
    """A target model, its optional head and contexts, and the session over them (engine thread)."""

    spec: LoadSpec
    name: str
    source: MtpSource  # resolved: off | integrated | external
    model: Model
    head_model: Model | None
    session: Session
    facts: MtpFacts
    #: what the load made of it, as every other layer reads it
    info: ModelInfo
    template: ChatTemplate = field(default_factory=lambda: ChatTemplate.of("default", "chatml"))
    #: the adaptive-depth policy of this model, kept across requests, and where it is saved
    #: (engine.runtime.decode.policy.store): made once, by :meth:`auto_depth`
    auto_policy: Any = None
    auto_policy_path: Path | None = None
    _policy_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: the prompt cache: snapshots of this model's prompt prefixes (set by the engine)
    snapshots: SnapshotCache | None = None
    #: a chat model's slots, one or several (``session`` is slot 0's), and the shared
    #: contexts; None for a pooling model
    slots: SlotPool | None = None
    shared: tuple[Context, ...] = ()
    #: recent outputs, for suffix drafts in later requests (bounded; lost with the model)
    outputs: OutputStore = field(default_factory=OutputStore)
    #: libmtmd over the model's projector (engine.runtime.media.projector); None: text only
    projector: Projector | None = None

    def auto_depth(self) -> AdaptiveDepth:
        """This model's adaptive-depth policy, shared by every request on it: made on first
        use from what this machine learned before. Any thread (requests' prepare threads ask at
        once after a load): it is made once, under a lock."""
        with self._policy_lock:
            if self.auto_policy is None:
                self.auto_policy_path = policy_path(self)
                self.auto_policy = load_policy(self.auto_policy_path, self.max_draft_depth)
            return self.auto_policy

    def use_prompt_cache(self, budget: int) -> None:
        """Keep snapshots of prompt prefixes within ``budget`` bytes (0: none), made on first
        use (engine thread)."""
        if self.snapshots is None:
            self.snapshots = SnapshotCache(budget)
        elif self.snapshots.budget != budget:
            self.snapshots.set_budget(budget)

    @property
    def max_draft_depth(self) -> int:
        """The deepest draft: the setting, capped where the family's drafting mode caps it
        (chained heads: one head per draft token)."""
        return min(self.spec.max_draft_depth, self.info.depth_limit or self.spec.max_draft_depth)

    def close(self) -> None:
        if self.snapshots is not None:
            self.snapshots.clear()
        if self.slots is not None:
            self.slots.close()
        sessions = [s.session for s in self.slots.slots] if self.slots is not None else [self.session]
        for session in sessions:
            session.close()
            if session.draft is not None:
                session.draft.close()
            session.target.close()
        for ctx in self.shared:  # the MTP context before the target it may read
            ctx.close()
        if self.projector is not None:
            self.projector.close()
        if self.head_model is not None:
            self.head_model.close()
        self.model.close()


def _checked(path: str | Path, what: str) -> tuple[ModelSet, MtpFacts]:
    report, facts, ms = validate_path(path)
    if not report.valid or ms is None:
        p = report.errors[0]
        if p.code == ModelNotFoundError.code:
            raise ModelNotFoundError(f"{what} file was not found: {p.file}. Check the path or download it again.")
        raise GGUFError(f"{what} is not a valid GGUF file: {p.message}", file=p.file, code=p.code)
    return ms, facts


def load(
    spec: LoadSpec,
    *,
    progress: Callable[[float, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> LoadedModel:
    """Check, plan, build and describe a model. Raises typed errors (never aborts the process
    on a file that failed validation)."""

    def report(fraction: float, what: str) -> None:
        if progress is not None:
            progress(fraction, what)

    c = _check(spec)
    p = _plan(c, report, cancel)
    b = _build(c, p, report, cancel)
    template = resolve_template(b.model, p.spec.chat_template)
    info = describe(c, p, b, template)
    lm = LoadedModel(
        p.spec,
        info.name,
        c.source,
        b.model,
        b.head_model,
        b.session,
        c.facts,
        info,
        template,
        slots=b.pool,
        shared=b.shared,
    )
    if p.spec.mmproj is not None:
        try:
            attach_projector(lm, p.spec.mmproj)
        except BaseException:
            lm.close()
            raise
    return lm


@dataclass(frozen=True)
class _Checked:
    """What the settings and the files' headers say, before anything is allocated."""

    #: the settings as the checks leave them (one sequence over RPC; MTP off and one
    #: sequence for a pooling model)
    spec: LoadSpec
    endpoints: tuple
    target: ModelSet
    facts: MtpFacts
    #: the external head's files, where one drafts
    head: ModelSet | None
    #: llama.cpp's pooling type of an embedding or rerank model; None for chat
    pooling: int | None
    source: MtpSource
    #: why auto left MTP off although the file has NextN layers (said with the load, never silent)
    mtp_off: str | None
    fam: MtpFamily | None
    #: how the head drafts (engine.gguf.families): single | chain | shared; None with MTP off
    mode: str | None
    #: chained heads: one NextN block per draft token, so also the deepest draft
    heads: int


def _check(spec: LoadSpec) -> _Checked:
    """The settings against what llama.cpp asserts on, the files structurally, the head
    against its target; the MTP source resolved."""
    limits.check_load_settings(
        n_ctx=spec.n_ctx,
        n_batch=spec.n_batch,
        max_draft_depth=spec.max_draft_depth,
        n_threads=spec.n_threads,
        parallel=spec.parallel,
    )
    if spec.exact and not exact_mod.tiled_off():
        raise InvalidSettingError(
            "Exact mode must be chosen before llama.cpp starts: run the command with --exact "
            f"(or set {exact_mod.EXACT_ENV}=1), or switch it on in the app and restart it."
        )
    endpoints = tuple(parse_endpoints(spec.rpc))
    if endpoints and spec.exact:
        raise InvalidSettingError(
            "Exact mode cannot be used with RPC devices: the helper machines' kernels are outside this build's "
            "control. Load without --rpc for exact mode."
        )
    if spec.tensor_split is not None and not endpoints:
        raise InvalidSettingError("A tensor split only applies with RPC devices (--rpc).")
    if endpoints and spec.parallel > 1:
        spec = replace(spec, parallel=1)  # a model over RPC runs in a worker process, one sequence at a time
    target_set, facts = _checked(spec.path, "The model")
    if spec.mmproj is not None:
        check_projector(spec.mmproj, spec.path)  # its header against the model's, before any probe
    pooling = pooling_of_file(target_set)
    if pooling is not None:  # embeddings or reranking: one pooled context, no drafting, no slots
        if spec.mtp in (MtpSource.INTEGRATED, MtpSource.EXTERNAL):
            raise MtpUnavailableError(
                f"This is {'a reranking' if pooling == 4 else 'an embedding'} model: it does not generate text, so it "
                "has nothing to draft. Load it with MTP off (or auto)."
            )
        spec = replace(spec, mtp=MtpSource.OFF, head=None, parallel=1)
    if spec.exact and (problem := exact_mod.head_dims_problem(target_set.first)):
        raise InvalidSettingError(problem)
    head_set = head_facts = None
    if spec.head is not None and spec.mtp != MtpSource.OFF:
        head_set, head_facts = _checked(spec.head, "The MTP head")
    source = resolve_source(spec.mtp, facts, head_set is not None)
    mtp_off = None
    if spec.mtp == MtpSource.AUTO and source == MtpSource.OFF and facts.kind == "integrated":
        mtp_off = f"MTP is off for this model: {mtp_problem(facts)}"
    if source == MtpSource.EXTERNAL:
        assert head_set is not None and head_facts is not None
        check_pair(Summary.of_set(target_set), Summary.of_set(head_set))
        if head_facts.nextn_missing:
            raise MtpUnavailableError(nextn_missing_problem(head_facts))
    drafter = head_facts if source == MtpSource.EXTERNAL else facts if source == MtpSource.INTEGRATED else None
    fam = family(drafter.architecture) if drafter is not None else None
    mode = fam.drafting_mode(drafter.nextn_layers) if fam is not None and drafter is not None else None
    heads = drafter.nextn_layers if mode == "chain" and drafter is not None else 1
    return _Checked(
        spec,
        endpoints,
        target_set,
        facts,
        head_set if source == MtpSource.EXTERNAL else None,
        pooling,
        source,
        mtp_off,
        fam,
        mode,
        heads,
    )


@dataclass(frozen=True)
class _Plan:
    """How the model will be loaded: the settings the memory check left, where the layers
    go, and what the load probe found."""

    spec: LoadSpec
    fit_report: fit.Fit | None
    placement: Placement | None
    verdict: LoadVerdict
    #: llama.cpp's CPU weight repacking for this load
    extra_bufts: bool


def _plan(c: _Checked, report: Callable[[float, str], None], cancel: threading.Event | None) -> _Plan:
    """The memory check, the layers' placement over RPC devices, and the load probe (a child
    process that loads and decodes the combination first; cached)."""
    spec, fit_report = c.spec, None
    if spec.fit != "off" and not c.endpoints:
        spec, fit_report = _check_fit(spec, c.target, c.head, c.source)
    placement = None
    if c.endpoints:
        report(0.0, "Connecting to the RPC servers")
        remote, local = rpcdevices.devices(list(c.endpoints))
        placement = plan_placement(
            remote,
            local,
            n_layer_trunk=(c.facts.block_count or 0) - c.facts.nextn_layers,
            n_nextn=c.facts.nextn_layers,
            weights=list(spec.tensor_split) if spec.tensor_split is not None else None,
        )
    verdict = LoadVerdict()
    if spec.probe:
        report(0.0, "Checking that llama.cpp runs this model (first load only)")
        verdict = check_load(
            ProbeRequest(
                str(spec.path),
                str(spec.head) if c.source == MtpSource.EXTERNAL else None,
                c.source.value,
                spec.n_gpu_layers,
                spec.max_draft_depth,
                spec.n_threads,
                spec.exact,
                str(spec.mmproj) if spec.mmproj is not None else None,
            ),
            cancel=cancel,
        )
    # the spec's word, else the probe's, else this machine's (engine.runtime.llama.repack)
    extra_bufts = spec.extra_bufts if spec.extra_bufts is not None else verdict.use_extra_bufts
    if extra_bufts is None:
        extra_bufts = repack.allowed()
    if spec.exact:
        extra_bufts = False  # repacked kernels differ between one row and several
    return _Plan(spec, fit_report, placement, verdict, extra_bufts)


@dataclass(frozen=True)
class _Built:
    """The llama.cpp objects of a load; closed again if a later stage fails."""

    model: Model
    head_model: Model | None
    session: Session
    pool: SlotPool | None
    shared: tuple[Context, ...]


def _build(c: _Checked, p: _Plan, report: Callable[[float, str], None], cancel: threading.Event | None) -> _Built:
    """The target, its head and their contexts, as planned."""
    spec, placement, source = p.spec, p.placement, c.source
    head_share = 0.3 if source == MtpSource.EXTERNAL else 0.0
    try:
        model = Model.load(
            spec.path,
            # a file that holds NextN tensors loads them even with MTP off: llama.cpp counts
            # them as missing otherwise ("wrong number of tensors") for most families
            load_mtp=c.facts.kind == "integrated",
            n_gpu_layers=spec.n_gpu_layers,
            progress=lambda f: report(
                f * (1 - head_share), "Loading the model" + (" across the RPC devices" if placement else "")
            ),
            cancel=cancel,
            use_extra_bufts=p.extra_bufts,
            placement=None if placement is None else LlamaParams(placement),  # held by the call
        )
    except ModelLoadError as e:
        raise ModelLoadError(nextn_load_failure(c.facts) or str(e)) from None
    head_model = None
    try:
        if source == MtpSource.EXTERNAL:
            head_model = Model.load(
                spec.head,  # type: ignore[arg-type]
                load_mtp=True,
                n_gpu_layers=spec.n_gpu_layers,
                progress=lambda f: report(1 - head_share + f * head_share, "Loading the MTP head"),
                cancel=cancel,
                use_extra_bufts=p.extra_bufts,
                placement=None if placement is None else LocalOnly(placement.local),
            )
            if head_model.n_embd_out != model.n_embd_out or head_model.n_vocab != model.n_vocab:
                raise HeadMismatchError("The head's hidden size or vocabulary does not match the target model.")
        session, pool, shared = make_contexts(
            spec,
            source,
            model,
            head_model,
            local_kv=placement is not None,
            heads=c.heads,
            holes_ok=c.fam.mrope if c.fam is not None else True,
            pooled=c.pooling is not None,
        )
        if (c.mode == "shared") != session.shared:  # the table and llama.cpp disagree: never draft on a guess
            for ctx in shared or tuple(x for x in (session.draft, session.target) if x is not None):
                ctx.close()
            raise MtpUnavailableError(
                f"{c.fam.label if c.fam is not None else c.facts.architecture}: llama.cpp "
                + (
                    "did not link this head to the target's KV cache"
                    if c.mode == "shared"
                    else "linked this head to the target's KV cache"
                )
                + ", which this app does not expect for this architecture. Load the model with MTP off (--mtp off)."
            )
    except BaseException:
        if head_model is not None:
            head_model.close()
        model.close()
        raise
    return _Built(model, head_model, session, pool, shared)


FIT_CHECKS = ("check", "shrink", "off")


def _check_fit(spec: LoadSpec, target: ModelSet, head: ModelSet | None, source: MtpSource) -> tuple[LoadSpec, fit.Fit]:
    """Refuse a load that cannot fit before anything is allocated; with ``fit="shrink"``
    first lower the context to the largest that fits. With a GPU that cannot take every
    layer, the layers that fit are offloaded (when the user left ``n_gpu_layers`` at -1)."""
    if spec.fit not in FIT_CHECKS:
        raise InvalidSettingError(f"fit must be one of {', '.join(FIT_CHECKS)}, got {spec.fit!r}")
    shape = ModelShape.of_set(target)
    head_shape = ModelShape.of_set(head) if head is not None else None
    devices = fit.machine_devices()

    def assess(n_ctx: int, parallel: int = 1) -> fit.Fit:
        # each slot has a KV stream of n_ctx cells: the cache is that many contexts' worth
        return fit.assess(
            shape,
            limits.effective_ctx(n_ctx, shape.n_ctx_train) * parallel,
            devices,
            mtp=source != MtpSource.OFF,
            head=head_shape,
            depth=max(1, spec.max_draft_depth),
            n_batch=spec.n_batch,
            n_gpu_layers=spec.n_gpu_layers,
            n_seq=parallel,
            projector=projector_size(spec.mmproj),
        )

    parallel = spec.parallel
    f = assess(spec.n_ctx, parallel)
    while not f.fits and parallel > 1:  # fewer slots before a smaller context or a refusal
        parallel = max(1, parallel // 2)
        f = assess(spec.n_ctx, parallel)
    spec = replace(spec, parallel=parallel)
    if not f.fits and spec.fit == "shrink" and f.max_ctx >= limits.MIN_CTX:
        spec = replace(spec, n_ctx=f.max_ctx)
        f = assess(spec.n_ctx)
    if not f.fits:
        raise InsufficientMemoryError(
            f.refusal() + " To load it anyway, turn the memory check off (--no-fit-check; in the app: Load anyway).",
            f.to_json(),
        )
    if f.verdict == "partial" and spec.n_gpu_layers < 0:
        spec = replace(spec, n_gpu_layers=f.estimate.gpu_layers)
    return spec, f
