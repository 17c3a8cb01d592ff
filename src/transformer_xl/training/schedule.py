"""Optimiser and learning-rate schedules of the paper's code.

The schedule is a pure function of the step, so resuming needs no scheduler state:

* ``cosine``: linear warm-up to ``lr`` over ``warmup_steps``, then cosine annealing from ``lr``
  to ``eta_min`` over ``max_steps`` (the paper's code anneals over the whole run and lets the
  warm-up override its first steps; so does this);
* ``inv_sqrt``: ``lr * step / warmup^1.5`` during warm-up, then ``lr / sqrt(step)``;
* ``constant``: linear warm-up, then ``lr``.
"""

from __future__ import annotations

import math

import torch

from .run_config import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based count of steps already taken)."""
    if cfg.scheduler == "inv_sqrt":
        if step == 0 and cfg.warmup_steps == 0:
            return cfg.lr
        if step > cfg.warmup_steps:
            return cfg.lr / math.sqrt(step)
        return cfg.lr * step / cfg.warmup_steps ** 1.5
    if step < cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.scheduler == "cosine":
        progress = min(step, cfg.max_steps) / cfg.max_steps
        return cfg.eta_min + (cfg.lr - cfg.eta_min) * (1 + math.cos(math.pi * progress)) / 2
    return cfg.lr


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    # The fused kernel does the whole update in one pass per tensor (4x faster than the default
    # multi-tensor path on CPU); it takes plain tensors on CPU or CUDA.
    fused = all(type(p.data) is torch.Tensor and p.device.type in ("cpu", "cuda") for p in params)
    cls = torch.optim.AdamW if cfg.optim == "adamw" else torch.optim.Adam
    return cls(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused or None)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
