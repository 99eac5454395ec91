"""MTP rules per architecture: the one table every reader of MTP asks.

Read from the llama.cpp that llama-cpp-python 0.3.36 vendors (``src/models/*.cpp``:
``load_arch_hparams`` / ``load_arch_tensors`` / ``graph_mtp``, ``common/speculative.cpp``:
``common_speculative_impl_draft_mtp``). Validation, pairing, compose, the loader, the
library's MTP status, the remote header check (``pull``) and auto's depth range read it;
adding a family is one :class:`MtpFamily` here (and a fixture in
:mod:`tests.synth.families`).

* **How the head ships** (:attr:`MtpFamily.ships`): ``"both"`` — NextN blocks appended to
  the trunk (``blk.{n_layer}.nextn.*``), in the same file or in a separate ``mtp-`` file
  that compose can merge; ``"separate"`` — only ever as a separate head file that is
  loaded beside the target (DeepSeek V4: its head carries root-level ``output_hc_*``
  tensors of its own, whose names the trunk's already use); ``"assistant"`` — a model of
  its own architecture (Gemma 4's ``gemma4-assistant``).
* **Drafting mode** (:attr:`MtpFamily.mode`), which also fixes the NextN count:
  ``"single"`` — one head, fed its own output for every further draft; the MTP graph
  asserts exactly one NextN layer (a process abort otherwise); ``"chain"`` — one or more
  heads, and with more than one head *i* drafts token *i*
  (``llama_set_nextn_layer_offset``), so depth is capped at the head count; ``"shared"``
  — an assistant, every block of its file a NextN block, reading the target's KV cache,
  every draft token of a round at the same position (``is_mem_shared``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: a tensor name's kind suffix; ``scale`` / ``input_scale`` (NVFP4-style) are loaded for
#: every tensor of every architecture by a generic pass
_KIND = re.compile(r"\.(weight|bias|scale|input_scale)$")


@dataclass(frozen=True)
class MtpFamily:
    arch: str
    ships: str = "both"  # both | separate | assistant
    mode: str = "single"  # single | chain | shared
    #: the trunk has recurrent blocks, and llama.cpp aborts at the first decode when a
    #: file of this architecture has none
    hybrid: bool = False
    #: root-level (non-``blk.``) ``nextn.*`` tensors a head file may carry (an assistant's
    #: projections); anywhere else a root-level NextN tensor is a damaged file
    head_root_tensors: frozenset[str] = frozenset()
    #: the architecture of the target an assistant drafts for
    target_arch: str | None = None
    #: why llama.cpp builds no MTP draft graph for it (for refusals); None: it does
    no_graph: str | None = None
    #: llama.cpp loads a trunk that declares NextN layers without their tensors (what its
    #: converter writes with --no-mtp); elsewhere such a file fails to load
    trunk_only: bool = False
    #: M-RoPE: llama.cpp lets an MTP batch's positions jump forward (skipped entries);
    #: every other family's MTP context needs consecutive positions
    mrope: bool = False
    #: tensors every NextN block must hold because llama.cpp's MTP graph asserts on them
    #: (a process abort) where loading lets them be absent (mimo2: the fused attn_qkv,
    #: where a trunk block may have attn_q/k/v instead)
    nextn_requires: tuple[str, ...] = ()
    #: what the family is, for the docs and messages
    label: str = ""

    @property
    def graph(self) -> bool:
        """llama.cpp builds an MTP draft graph for it."""
        return self.no_graph is None

    def drafting_mode(self, n_nextn: int) -> str:
        """single, chain or shared, as llama.cpp derives it: chained heads need more than
        one (and then cap the depth at the head count)."""
        if self.mode == "chain" and n_nextn <= 1:
            return "single"
        return self.mode

    def nextn_problem(self, n_nextn: int) -> str | None:
        """Why a file with ``n_nextn`` NextN layers cannot draft, in words; None when it can."""
        if n_nextn < 1:
            return None
        if self.mode == "single" and n_nextn != 1:
            return (
                f"llama.cpp's {self.arch} MTP graph runs exactly one NextN layer and this file declares {n_nextn}; "
                "it would abort the process. Use a file converted with one MTP layer, or load it with MTP off."
            )
        return None


#: a MoE block with shared experts (GLM-4.7-Flash's MTP graph asserts each)
_MOE_SHEXP = (
    "ffn_gate_inp.weight",
    "ffn_down_exps.weight",
    "ffn_gate_shexp.weight",
    "ffn_up_shexp.weight",
    "ffn_down_shexp.weight",
)

_NO_GRAPH = "llama.cpp loads its NextN layers but builds no MTP draft graph for it"

FAMILIES: dict[str, MtpFamily] = {
    f.arch: f
    for f in (
        MtpFamily("qwen35", hybrid=True, mrope=True, label="Qwen3.5"),
        MtpFamily("qwen35moe", hybrid=True, mrope=True, label="Qwen3.5 MoE / Qwen3.6"),
        MtpFamily("qwen3next", hybrid=True, label="Qwen3-Next"),
        MtpFamily("glm4moe", trunk_only=True, label="GLM-4.5 / 4.6 / 4.7"),
        MtpFamily(
            "deepseek2",
            trunk_only=True,
            nextn_requires=_MOE_SHEXP,
            label="GLM-4.7-Flash (the DeepSeek V3 / V3.1 / Kimi converters drop MTP)",
        ),
        MtpFamily("deepseek32", trunk_only=True, nextn_requires=("ffn_gate_inp.weight",), label="DeepSeek V3.2"),
        MtpFamily("deepseek4", ships="separate", label="DeepSeek V4"),
        MtpFamily("glm-dsa", trunk_only=True, label="GLM-5"),
        MtpFamily(
            "glm5-next",
            trunk_only=True,
            no_graph="llama.cpp has no GLM5-Next NextN graph yet (it throws when asked to draft)",
            label="GLM-5-Next",
        ),
        MtpFamily("mimo2", trunk_only=True, mode="chain", nextn_requires=("attn_qkv.weight",), label="MiMo-V2"),
        MtpFamily("step35", trunk_only=True, mode="chain", label="Step-3.5"),
        MtpFamily("hy_v3", trunk_only=True, mode="chain", label="Hunyuan V3"),
        MtpFamily("bailingmoe3", trunk_only=True, label="Ling 3"),
        MtpFamily("cohere2moe", trunk_only=True, nextn_requires=("ffn_gate_inp.weight",), label="Cohere2 MoE"),
        MtpFamily("nemotron_h_moe", hybrid=True, label="Nemotron-H MoE"),
        MtpFamily(
            "gemma4-assistant",
            ships="assistant",
            mode="shared",
            head_root_tensors=frozenset({"nextn.pre_projection", "nextn.post_projection"}),
            target_arch="gemma4",
            label="Gemma 4 assistant (drafter)",
        ),
        *(
            MtpFamily(a, no_graph=_NO_GRAPH, label=a)
            for a in ("dots3note", "exaone4", "exaone-moe", "bailingmoe2", "glm4", "nemotron_h")
        ),
    )
}

#: architectures whose targets an assistant architecture drafts for
ASSISTANTS: dict[str, str] = {f.target_arch: f.arch for f in FAMILIES.values() if f.target_arch}


def family(arch: str | None) -> MtpFamily | None:
    return FAMILIES.get(arch or "")


def drafts(arch: str | None) -> bool:
    """llama.cpp can draft with this architecture's MTP layers (or it is an assistant)."""
    f = family(arch)
    return f is not None and f.graph


def no_mtp_reason(arch: str | None) -> str:
    """Why ``arch`` cannot draft, for a refusal that says what to do."""
    f = family(arch)
    if f is not None and f.no_graph:
        return f"{f.label or arch}: {f.no_graph}. Run it without MTP (--mtp off)."
    if arch in ASSISTANTS:
        return f"{arch} has no MTP layers of its own: draft with its assistant ({ASSISTANTS[arch]}) as the MTP head."
    return f"llama.cpp has no MTP draft graph for architecture {arch!r}. Run it without MTP (--mtp off)."


def tensor_base(name: str) -> str:
    """A tensor name without its kind suffix: ``attn_q.input_scale`` → ``attn_q``."""
    return _KIND.sub("", name)


def is_head_root_tensor(arch: str | None, name: str) -> bool:
    """A root-level tensor a head file of ``arch`` may hold (besides the shared ones)."""
    f = family(arch)
    return f is not None and tensor_base(name) in f.head_root_tensors
