"""BatchNorm as a cluster computes it, in fewer processes than the cluster has GPUs.

On a cluster each GPU normalises over its own share of the global batch (global batch / GPUs
images), and DDP keeps rank 0's running statistics (it broadcasts the buffers every step). A
proxy trial or promotion that trains the same global batch in one process would normalise over
all of it, a much easier problem at a few images per GPU. `PerGpuBatchNorm` normalises each
group of `group_size` consecutive images on its own (the images rank r of the cluster would get
are the r-th group, as `rank_slice` deals them) and keeps the first group's statistics as the
running ones. A batch that does not divide into whole groups folds its remainder into the last
group (the cluster would drop those images).

BatchNorm subclasses that do more than normalise (timm's BatchNormAct2d adds the activation)
keep their class: their own forward runs group by group instead, slower but the same result."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PerGpuBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm1d/2d whose training statistics are per group of `group_size` images."""

    group_size: int = 0  # 0 or at least the batch: plain BatchNorm over the whole batch

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, g = x.shape[0], self.group_size
        if not self.training or g <= 0 or n < 2 * g:
            return super().forward(x)
        groups = n // g
        equal = groups if n == groups * g else groups - 1  # the last group takes the remainder
        out = self._groups(x[:equal * g], equal, g)
        if equal < groups:
            last = F.batch_norm(x[equal * g:], None, None, self.weight, self.bias, True, 0.0, self.eps)
            out = torch.cat([out, last])
        return out

    def _groups(self, x: torch.Tensor, groups: int, g: int) -> torch.Tensor:
        """`groups` groups of `g` images through one fused BatchNorm: each group's channels become
        channels of their own (the images of a group stacked as the batch), so the kernel's
        per-channel statistics are per group and channel."""
        channels, rest = x.shape[1], x.shape[2:]
        stacked = x.reshape(groups, g, channels, *rest).transpose(0, 1).reshape(g, groups * channels, *rest)
        mean = var = None
        momentum = 0.0
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
            mean, var = self.running_mean.repeat(groups), self.running_var.repeat(groups)
        weight = self.weight.repeat(groups) if self.affine else None
        bias = self.bias.repeat(groups) if self.affine else None
        y = F.batch_norm(stacked, mean, var, weight, bias, True, momentum, self.eps)
        if mean is not None:  # rank 0's statistics, as DDP's buffer broadcast keeps them
            with torch.no_grad():
                self.running_mean.copy_(mean[:channels])
                self.running_var.copy_(var[:channels])
        y = y.reshape(g, groups, channels, *rest).transpose(0, 1).reshape(x.shape)
        if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
            y = y.contiguous(memory_format=torch.channels_last)  # the run's layout, for the next conv
        return y


def convert(model: nn.Module) -> nn.Module:
    """Every BatchNorm1d/2d of `model` (not SyncBatchNorm) made a PerGpuBatchNorm with the same
    parameters and statistics, a subclass of theirs grouped in place; `set_group_size` then sets
    the images per GPU."""
    for name, child in model.named_children():
        if type(child) in (nn.BatchNorm1d, nn.BatchNorm2d):
            new = PerGpuBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                  child.track_running_stats, device=child.weight.device if child.affine else None)
            new.load_state_dict(child.state_dict())
            setattr(model, name, new)
        elif isinstance(child, nn.BatchNorm1d | nn.BatchNorm2d) and not isinstance(child, PerGpuBatchNorm):
            _group_in_place(child)
        else:
            convert(child)
    return model


def _group_in_place(layer: nn.modules.batchnorm._BatchNorm) -> None:
    """The layer's own forward, run on each group of images; the first group's running
    statistics are kept, as DDP keeps rank 0's."""
    plain = layer.forward
    layer.group_size = 0

    def forward(x: torch.Tensor) -> torch.Tensor:
        n, g = x.shape[0], layer.group_size
        if not layer.training or g <= 0 or n < 2 * g:
            return plain(x)
        groups = n // g
        bounds = [i * g for i in range(groups)] + [n]  # the last group takes the remainder
        out = [plain(x[bounds[0]:bounds[1]])]
        # the other groups update scratch copies; autograd saved the originals, left untouched
        kept = dict(layer.named_buffers(recurse=False))
        for name, buffer in kept.items():
            setattr(layer, name, buffer.clone())
        out += [plain(x[a:b]) for a, b in zip(bounds[1:-1], bounds[2:], strict=True)]
        for name, buffer in kept.items():
            setattr(layer, name, buffer)
        return torch.cat(out)

    layer.forward = forward


def set_group_size(model: nn.Module, images_per_gpu: int) -> int:
    """Normalise over groups of `images_per_gpu` from now on (each phase has its own); returns
    how many layers took it."""
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and hasattr(m, "group_size")]
    for m in layers:
        m.group_size = images_per_gpu
    return len(layers)


def emulated_groups(distributed, world: int) -> int:
    """How many groups the emulated cluster's BatchNorm statistics come in: one per GPU, or one
    per node with node-scope SyncBatchNorm; 0 when there is nothing to emulate (as many ranks as
    GPUs, or SyncBatchNorm over the world, which the process's whole batch already computes).
    `distributed`: the run config's DistributedConfig."""
    if distributed.emulate_gpus <= world:
        return 0
    if distributed.sync_bn:
        if distributed.sync_bn_scope != "node":
            return 0
        return distributed.emulate_gpus // distributed.emulate_gpus_per_node
    return distributed.emulate_gpus
