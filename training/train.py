"""The training loop: trunk + MTP loss, then an optional distillation phase; checkpoints
and resume; a JSON-lines log.

Loss: cross-entropy of the trunk on token ``t + 1`` plus ``mtp_weight`` times the MTP
head's cross-entropy on token ``t + 2``. In the last ``distill_fraction`` of the steps the
trunk (with the shared embedding and output head) is frozen and the MTP head learns the
trunk's own next-token distribution instead (KL divergence): a draft is accepted when it
matches what the trunk would emit, so that is the target worth matching.

Deterministic given the seed, the torch version and the CPU's instruction set, with one
torch thread (which is also the fast setting here: the chunked delta rule's small
triangular solves are much slower with two threads).
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.fileio import write_atomic
from training.data import Windows, eval_windows
from training.model import ModelConfig, Qwen35


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 2026
    seq_len: int = 256
    batch: int = 16
    steps: int = 2000
    lr: float = 3e-3
    min_lr_fraction: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    mtp_weight: float = 0.5
    distill_fraction: float = 0.15
    eval_every: int = 250
    eval_windows: int = 48
    checkpoint_every: int = 100

    def lr_at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        frac = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (self.min_lr_fraction + (1 - self.min_lr_fraction) * 0.5 * (1 + math.cos(math.pi * frac)))

    def distilling(self, step: int) -> bool:
        return step >= round(self.steps * (1 - self.distill_fraction))


def losses(model: Qwen35, tokens: torch.Tensor, *, distill: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(trunk loss, MTP loss) for a batch of windows."""
    V = model.c.n_vocab
    if distill:
        with torch.no_grad():
            h = model.trunk(tokens)
            teacher = F.log_softmax(model.output(h[:, 1:-1]), dim=-1)  # trunk at t+1 predicts t+2
        mtp_logits = model.output(model.mtp_hidden(tokens, h))[:, :-1]
        mtp = (
            F.kl_div(F.log_softmax(mtp_logits, dim=-1), teacher, log_target=True, reduction="batchmean")
            / tokens.shape[1]
        )
        trunk = F.cross_entropy(model.output(h[:, :-1]).reshape(-1, V), tokens[:, 1:].reshape(-1))
        return trunk, mtp
    trunk_logits, mtp_logits = model(tokens)
    trunk = F.cross_entropy(trunk_logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
    mtp = F.cross_entropy(mtp_logits[:, :-1].reshape(-1, V), tokens[:, 2:].reshape(-1))
    return trunk, mtp


@torch.no_grad()
def evaluate(model: Qwen35, windows: np.ndarray, batch: int = 16) -> dict:
    """Held-out trunk and MTP loss, and how often the MTP head's top token equals the
    trunk's (the depth-1 acceptance on teacher-forced text)."""
    model.eval()
    V = model.c.n_vocab
    tl = ml = agree = n = 0.0
    for i in range(0, len(windows), batch):
        x = torch.from_numpy(windows[i : i + batch])
        h = model.trunk(x)
        lt = model.output(h)
        lm = model.output(model.mtp_hidden(x, h))
        tl += F.cross_entropy(lt[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1), reduction="sum").item()
        ml += F.cross_entropy(lm[:, :-1].reshape(-1, V), x[:, 2:].reshape(-1), reduction="sum").item()
        agree += (lm[:, :-1].argmax(-1) == lt[:, 1:-1].argmax(-1)).sum().item()
        n += x.shape[0] * (x.shape[1] - 2)
    model.train()
    return {"trunk_loss": tl / n, "mtp_loss": ml / n, "mtp_agreement": agree / n}


def _param_groups(model: Qwen35, frozen_trunk: bool, wd: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if frozen_trunk and not name.startswith("mtp."):
            continue
        (decay if p.ndim == 2 and "conv" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def _optimizer(model: Qwen35, cfg: TrainConfig, frozen_trunk: bool) -> torch.optim.Optimizer:
    return torch.optim.AdamW(_param_groups(model, frozen_trunk, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.95))


def _save(path: Path, obj: dict) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    write_atomic(path, buf.getvalue(), fsync=False)


def train(
    out: Path,
    mcfg: ModelConfig,
    cfg: TrainConfig,
    stream: np.ndarray,
    held_out: np.ndarray,
    *,
    deadline: float | None = None,
    log: Callable[[dict], None] = lambda r: print(json.dumps(r), flush=True),
) -> Qwen35:
    """Train (or resume from ``out/checkpoint.pt``) until ``cfg.steps`` or ``deadline``
    (a ``time.time()``; the run checkpoints and stops, to be resumed later)."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    model = Qwen35(mcfg)
    windows = Windows(stream, cfg.seq_len, cfg.seed)
    evals = eval_windows(held_out, cfg.seq_len, cfg.eval_windows)
    ckpt = out / "checkpoint.pt"
    step, elapsed = 0, 0.0
    distill = False
    opt = _optimizer(model, cfg, frozen_trunk=False)
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        if state["model_config"] != mcfg.to_dict() or state["train_config"] != asdict(cfg):
            raise ValueError(f"{ckpt} was made with other settings; use a new --out folder or delete it")
        model.load_state_dict(state["model"])
        step, elapsed, distill = state["step"], state["elapsed"], state["distill"]
        opt = _optimizer(model, cfg, frozen_trunk=distill)
        opt.load_state_dict(state["optimizer"])
        windows.restore(state["windows"])
        torch.set_rng_state(state["torch_rng"])
        log({"event": "resumed", "step": step})

    def checkpoint() -> None:
        _save(
            ckpt,
            {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "windows": windows.state(),
                "torch_rng": torch.get_rng_state(),
                "step": step,
                "elapsed": elapsed,
                "distill": distill,
                "model_config": mcfg.to_dict(),
                "train_config": asdict(cfg),
            },
        )

    t_last = time.time()
    tokens_seen = 0
    while step < cfg.steps:
        if cfg.distilling(step) and not distill:
            distill = True
            opt = _optimizer(model, cfg, frozen_trunk=True)
            log({"event": "distill", "step": step})
        for g in opt.param_groups:
            g["lr"] = cfg.lr_at(step)
        x = torch.from_numpy(windows.batch(cfg.batch))
        trunk_loss, mtp_loss = losses(model, x, distill=distill)
        loss = mtp_loss if distill else trunk_loss + cfg.mtp_weight * mtp_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], cfg.grad_clip)
        opt.step()
        step += 1
        tokens_seen += x.numel()
        now = time.time()
        elapsed += now - t_last
        t_last = now
        if step % 10 == 0 or step == cfg.steps:
            log(
                {
                    "step": step,
                    "trunk_loss": round(trunk_loss.item(), 4),
                    "mtp_loss": round(mtp_loss.item(), 4),
                    "lr": round(cfg.lr_at(step - 1), 6),
                    "elapsed_s": round(elapsed, 1),
                    "tokens_per_s": round(step * x.numel() / max(elapsed, 1e-9)),
                }
            )
        if step % cfg.eval_every == 0 or step == cfg.steps:
            log({"step": step, "eval": evaluate(model, evals)})
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            checkpoint()
        if deadline is not None and time.time() >= deadline and step < cfg.steps:
            checkpoint()
            log({"event": "paused", "step": step, "resume": "run the same command again"})
            break
    return model


def load_trained(out: Path) -> tuple[Qwen35, dict]:
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    model = Qwen35(ModelConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    model.eval()
    return model, state
