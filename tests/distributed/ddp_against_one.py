"""What the gloo workers that check per-GPU BatchNorm share: every rank builds the same small
ResNet and fixed batch, and rank 0 compares the DDP-trained model with one trained in a single
process (BatchNorm per emulated rank)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.core.run_config import ModelConfig
from tianfeng.trainers import per_gpu_bn
from tianfeng.trainers.models import build_model


@dataclass
class Setup:
    rank: int
    world: int
    model: nn.Module  # trained under DDP
    reference: nn.Module  # the same weights, for the one process
    x: torch.Tensor  # the whole batch: per_rank images of each rank
    y: torch.Tensor


def start(per_rank: int) -> Setup:
    """Join the gloo group; the same model and batch on every rank (the same seed)."""
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = build_model(ModelConfig(width=8, depth=1, stages=2, zero_init_residual=False), 3, 5)
    world = dist.get_world_size()
    return Setup(dist.get_rank(), world, model, copy.deepcopy(model), torch.randn(per_rank * world, 3, 12, 12),
                 torch.randint(0, 5, (per_rank * world,)))


def differences(model: nn.Module, emulated: nn.Module) -> dict[str, float]:
    """The largest gaps between the DDP model and the one-process model after their step: in the
    gradients (with the gradients' own scale) and in the first BatchNorm's running mean."""
    bn, first_bn = first_batch_norms(model, emulated)
    return {"grad_diff": max((a.grad - b.grad).abs().max().item()
                             for a, b in zip(model.parameters(), emulated.parameters(), strict=True)),
            "grad_scale": max(a.grad.abs().max().item() for a in model.parameters()),
            "running_mean_diff": (bn.running_mean - first_bn.running_mean).abs().max().item()}


def first_batch_norms(model: nn.Module, emulated: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The one-process model's first per-GPU BatchNorm and the DDP model's first BatchNorm."""
    return (next(m for m in emulated.modules() if isinstance(m, per_gpu_bn.PerGpuBatchNorm)),
            next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d)))
