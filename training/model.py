"""A PyTorch mirror of llama.cpp's qwen35 graph, small enough to train on one CPU thread.

Every operation follows ``src/models/qwen35.cpp`` and ``src/models/delta-net-base.cpp`` of
the llama.cpp that llama-cpp-python 0.3.36 vendors, so a model trained here and written to
GGUF by :mod:`training.export` gives llama.cpp's logits (the parity test checks it):

* trunk blocks: RMSNorm -> (gated delta-net | gated full attention) -> residual ->
  RMSNorm -> SwiGLU FFN -> residual; a full-attention block every
  ``full_attention_interval`` blocks;
* gated delta-net: one ``qkv`` projection through a causal depthwise conv + SiLU, L2-normed
  q/k, ``beta = sigmoid(W_beta x)``, per-head decay ``exp(softplus(W_alpha x + dt) * a)``
  with ``a = -exp(A_log)``, the delta rule, then a per-head RMSNorm gated by ``silu(z)``;
* gated attention: the q projection interleaves (query, gate) per head, q/k RMSNorm,
  NEOX rotary embedding (ggml's interleaved M-RoPE with every pair rotated and all three
  position streams equal, which is what text tokens get), output times ``sigmoid(gate)``;
* the NextN (MTP) block: ``eh_proj(concat[enorm(embed(x[t+1])), hnorm(h[t])])`` where
  ``h`` is the trunk's hidden state after ``output_norm``, one gated-attention block with
  its FFN, ``shared_head_norm`` and the shared output head: it predicts token ``t + 2``.

The training form of the delta rule is the chunked one (a triangular solve per chunk);
:func:`delta_rule_recurrent` is the token-by-token form llama.cpp runs while decoding,
kept as the reference the chunked form is tested against.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    n_vocab: int
    n_embd: int = 192
    n_ff: int = 512
    n_trunk: int = 4
    full_attention_interval: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64  # a multiple of 32: exact mode's Q8_0 KV cache needs whole blocks per head
    ssm_state: int = 32  # head_k_dim == head_v_dim
    ssm_heads: int = 4  # key heads == value heads (no head repeat: the simplest mapping to ggml)
    ssm_conv: int = 4
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    n_ctx_train: int = 4096

    def is_recurrent(self, il: int) -> bool:
        return il < self.n_trunk and (il + 1) % self.full_attention_interval != 0

    @property
    def rope_sections(self) -> tuple[int, int, int, int]:
        """M-RoPE sections that make ggml's interleaved M-RoPE rotate every pair."""
        pairs = self.head_dim // 2
        s = -(-pairs // 3)  # ceil
        sections = (s, s, pairs - 2 * s, 0)
        for j in range(pairs):  # ggml_mrope_cache_init, is_imrope: which pairs rotate
            sector = j % sum(sections)
            rotated = (
                (sector % 3 == 0 and sector < 3 * sections[0])
                or (sector % 3 == 1 and sector < 3 * sections[1])
                or (sector % 3 == 2 and sector < 3 * sections[2])
            )
            if not rotated:
                raise ValueError(f"head_dim {self.head_dim}: M-RoPE sections {sections} leave pair {j} unrotated")
        return sections

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def l2_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    # build_gdn_l2_norm: rms_norm(x, eps / n) / sqrt(n) == x / sqrt(sum(x^2) + eps)
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def rope_tables(n_pos: int, head_dim: int, base: float, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    half = head_dim // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / head_dim)
    ang = torch.arange(offset, offset + n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NEOX rotation: pair (i, i + d/2). x: (B, T, H, D); cos/sin: (T, D/2)."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def delta_rule_recurrent(q, k, v, g, beta):
    """Token-by-token gated delta rule, as llama.cpp decodes. q,k: (B,H,T,Dk) (q already
    scaled), v: (B,H,T,Dv), g: (B,H,T) log-decay, beta: (B,H,T). Returns (B,H,T,Dv)."""
    B, H, T, Dk = k.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1])
    out = []
    for t in range(T):
        S = S * g[:, :, t, None, None].exp()
        kv_mem = torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        d = (v[:, :, t] - kv_mem) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * d[:, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))
    return torch.stack(out, dim=2)


def delta_rule_chunked(q, k, v, g, beta, chunk: int = 64):
    """The same recurrence in chunks (WY form): within a chunk the delta-rule updates are a
    unit lower-triangular system, solved at once; between chunks the state carries over."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (chunk - T % chunk) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v))
    g = g.reshape(B, H, n, chunk).cumsum(-1)
    beta = beta.reshape(B, H, n, chunk)
    k_beta = k * beta[..., None]
    v_beta = v * beta[..., None]
    lower = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), diagonal=-1)
    decay = (
        (g[..., :, None] - g[..., None, :])
        .masked_fill(~torch.tril(torch.ones(chunk, chunk, dtype=torch.bool)), -math.inf)
        .exp()
    )
    a = (k_beta @ k.transpose(-1, -2) * decay).masked_fill(~lower, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype).expand_as(a)
    w = torch.linalg.solve_triangular(eye + a, eye, upper=False, unitriangular=True)
    u = w @ v_beta  # (B,H,n,C,Dv)
    k_cum = w @ (k_beta * g.exp()[..., None])
    causal = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))
    S = q.new_zeros(B, H, Dk, Dv)
    outs = []
    for i in range(n):
        qi, ki, gi = q[:, :, i], k[:, :, i], g[:, :, i]
        attn = (qi @ ki.transpose(-1, -2) * decay[:, :, i]).masked_fill(~causal, 0.0)
        v_new = u[:, :, i] - k_cum[:, :, i] @ S
        outs.append((qi * gi.exp()[..., None]) @ S + attn @ v_new)
        g_last = gi[..., -1]
        S = (
            S * g_last.exp()[..., None, None]
            + (ki * (g_last[..., None] - gi).exp()[..., None]).transpose(-1, -2) @ v_new
        )
    out = torch.stack(outs, dim=2).reshape(B, H, n * chunk, Dv)
    return out[:, :, :T]


class DeltaNet(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.c = c
        self.key_dim = c.ssm_state * c.ssm_heads
        self.value_dim = c.ssm_state * c.ssm_heads
        conv_dim = 2 * self.key_dim + self.value_dim
        self.qkv = nn.Linear(c.n_embd, conv_dim, bias=False)
        self.gate = nn.Linear(c.n_embd, self.value_dim, bias=False)
        self.conv = nn.Parameter(torch.randn(conv_dim, c.ssm_conv) / math.sqrt(c.ssm_conv))
        self.dt_bias = nn.Parameter(torch.zeros(c.ssm_heads))
        self.a_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, c.ssm_heads)))
        self.beta = nn.Linear(c.n_embd, c.ssm_heads, bias=False)
        self.alpha = nn.Linear(c.n_embd, c.ssm_heads, bias=False)
        self.norm = RMSNorm(c.ssm_state, c.norm_eps)
        self.out = nn.Linear(self.value_dim, c.n_embd, bias=False)

    def forward(self, x: torch.Tensor, recurrent: bool = False) -> torch.Tensor:
        c = self.c
        B, T, _ = x.shape
        mixed = self.qkv(x)  # (B,T,C)
        # causal depthwise conv (ggml_ssm_conv with a zero initial state), then SiLU
        padded = F.pad(mixed.transpose(1, 2), (c.ssm_conv - 1, 0))
        conv = F.conv1d(padded, self.conv[:, None, :], groups=mixed.shape[-1]).transpose(1, 2)
        conv = F.silu(conv)
        H, D = c.ssm_heads, c.ssm_state
        q = conv[..., : self.key_dim].reshape(B, T, H, D)
        k = conv[..., self.key_dim : 2 * self.key_dim].reshape(B, T, H, D)
        v = conv[..., 2 * self.key_dim :].reshape(B, T, H, D)
        q = l2_norm(q, c.norm_eps) / math.sqrt(D)
        k = l2_norm(k, c.norm_eps)
        beta = torch.sigmoid(self.beta(x))  # (B,T,H)
        g = F.softplus(self.alpha(x) + self.dt_bias) * -self.a_log.exp()
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        g, beta = g.transpose(1, 2), beta.transpose(1, 2)
        rule = delta_rule_recurrent if recurrent else delta_rule_chunked
        o = rule(q, k, v, g, beta).transpose(1, 2)  # (B,T,H,D)
        z = self.gate(x).reshape(B, T, H, D)
        o = self.norm(o) * F.silu(z)
        return self.out(o.reshape(B, T, H * D))


class GatedAttention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.c = c
        self.q = nn.Linear(c.n_embd, c.head_dim * c.n_head * 2, bias=False)
        self.k = nn.Linear(c.n_embd, c.head_dim * c.n_head_kv, bias=False)
        self.v = nn.Linear(c.n_embd, c.head_dim * c.n_head_kv, bias=False)
        self.o = nn.Linear(c.head_dim * c.n_head, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        c = self.c
        B, T, _ = x.shape
        qg = self.q(x).reshape(B, T, c.n_head, 2, c.head_dim)  # per head: (query, gate)
        q, gate = qg[..., 0, :], qg[..., 1, :]
        k = self.k(x).reshape(B, T, c.n_head_kv, c.head_dim)
        v = self.v(x).reshape(B, T, c.n_head_kv, c.head_dim)
        q = apply_rope(self.q_norm(q), cos, sin)
        k = apply_rope(self.k_norm(k), cos, sin)
        rep = c.n_head // c.n_head_kv  # ggml broadcast: query head h reads kv head h // rep
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        att = att.transpose(1, 2) * torch.sigmoid(gate)
        return self.o(att.reshape(B, T, c.n_head * c.head_dim))


class FFN(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c: ModelConfig, recurrent: bool):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.mixer: nn.Module = DeltaNet(c) if recurrent else GatedAttention(c)
        self.post_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.ffn = FFN(c)

    def forward(self, x, cos, sin, recurrent_rule: bool = False):
        h = self.attn_norm(x)
        if isinstance(self.mixer, DeltaNet):
            h = self.mixer(h, recurrent=recurrent_rule)
        else:
            h = self.mixer(h, cos, sin)
        x = x + h
        return x + self.ffn(self.post_norm(x))


class NextN(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.enorm = RMSNorm(c.n_embd, c.norm_eps)
        self.hnorm = RMSNorm(c.n_embd, c.norm_eps)
        self.eh_proj = nn.Linear(2 * c.n_embd, c.n_embd, bias=False)
        self.block = Block(c, recurrent=False)
        self.head_norm = RMSNorm(c.n_embd, c.norm_eps)

    def forward(self, emb_next: torch.Tensor, h: torch.Tensor, cos, sin) -> torch.Tensor:
        x = self.eh_proj(torch.cat([self.enorm(emb_next), self.hnorm(h)], dim=-1))
        return self.head_norm(self.block(x, cos, sin))


class Qwen35(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        c.rope_sections  # validates head_dim
        self.c = c
        self.embed = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList(Block(c, c.is_recurrent(i)) for i in range(c.n_trunk))
        self.output_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.output = nn.Linear(c.n_embd, c.n_vocab, bias=False)
        self.mtp = NextN(c)
        self._init()

    def _init(self) -> None:
        for name, p in self.named_parameters():
            if p.ndim == 2 and "conv" not in name:
                nn.init.normal_(p, std=0.02)
        scale = 0.02 / math.sqrt(2 * (self.c.n_trunk + 1))
        for m in self.modules():  # residual-writing projections start small
            if isinstance(m, (DeltaNet,)):
                nn.init.normal_(m.out.weight, std=scale)
            elif isinstance(m, GatedAttention):
                nn.init.normal_(m.o.weight, std=scale)
            elif isinstance(m, FFN):
                nn.init.normal_(m.down.weight, std=scale)

    def trunk(self, tokens: torch.Tensor, recurrent_rule: bool = False) -> torch.Tensor:
        """Hidden states after ``output_norm`` (llama.cpp's ``h_nextn``), (B, T, d)."""
        cos, sin = rope_tables(tokens.shape[1], self.c.head_dim, self.c.rope_base)
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin, recurrent_rule)
        return self.output_norm(x)

    def mtp_hidden(self, tokens: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """MTP hidden states: position t sees (h[t], tokens[t+1]) and predicts token t+2.
        Returns (B, T-1, d)."""
        cos, sin = rope_tables(tokens.shape[1] - 1, self.c.head_dim, self.c.rope_base)
        return self.mtp(self.embed(tokens[:, 1:]), h[:, :-1], cos, sin)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(trunk logits (B,T,V), MTP logits (B,T-1,V))."""
        h = self.trunk(tokens)
        return self.output(h), self.output(self.mtp_hidden(tokens, h))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
