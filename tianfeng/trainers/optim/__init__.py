"""Optimizers: SGD (torch's), LARS and LAMB (ours), over parameter groups that keep BN and bias
parameters out of weight decay and out of layer-wise trust-ratio scaling."""

from __future__ import annotations

import torch
from torch import nn

from tianfeng.core.run_config import OptimizerConfig
from tianfeng.trainers.optim.lamb import Lamb
from tianfeng.trainers.optim.lars import Lars


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weights (decayed, trust-ratio scaled) and BN/bias (neither), as in timm."""
    decay, no_decay = [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay, "layer_adaptation": True},
        {"params": no_decay, "weight_decay": 0.0, "layer_adaptation": False},
    ]


def build_optimizer(model: nn.Module, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    groups = parameter_groups(model, cfg.weight_decay)
    if cfg.name == "sgd":
        for g in groups:
            g.pop("layer_adaptation")
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    if cfg.name == "lars":
        return Lars(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                    trust_coefficient=cfg.lars.trust_coefficient, eps=cfg.lars.eps,
                    update=cfg.lars.update)
    return Lamb(groups, lr=cfg.lr, betas=(cfg.lamb.beta1, cfg.lamb.beta2), eps=cfg.lamb.eps)


__all__ = ["Lamb", "Lars", "build_optimizer", "parameter_groups"]
