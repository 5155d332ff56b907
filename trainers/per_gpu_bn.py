"""BatchNorm as a cluster computes it, in fewer processes than the cluster has GPUs.

On a cluster each GPU normalises over its own share of the global batch (global batch / GPUs
images), and DDP keeps rank 0's running statistics (it broadcasts the buffers every step). A
proxy trial or promotion that trains the same global batch in one process would normalise over
all of it, a much easier problem at a few images per GPU. `PerGpuBatchNorm` normalises each
group of `group_size` consecutive images on its own (the images rank r of the cluster would get
are the r-th group, as `rank_slice` deals them) and keeps the first group's statistics as the
running ones. A batch that does not divide into whole groups folds its remainder into the last
group (the cluster would drop those images)."""

from __future__ import annotations

import torch
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
        out_dtype, xf = x.dtype, x.float()  # statistics in fp32 whatever the autocast dtype
        channel = (1, -1) + (1,) * (x.dim() - 2)
        if n == groups * g:  # whole groups: one view, two reductions
            grouped = xf.view(groups, g, *xf.shape[1:])
            dims = (1, *range(3, grouped.dim()))
            var, mean = torch.var_mean(grouped, dim=dims, correction=0, keepdim=True)
            xhat = ((grouped - mean) * torch.rsqrt(var + self.eps)).view_as(xf)
            first_mean, first_var = mean[0].flatten(), var[0].flatten()
        else:  # the last group holds the remainder: sums per group by index
            gid = (torch.arange(n, device=x.device) // g).clamp_max(groups - 1)
            per_image = xf.flatten(2).sum(2) if x.dim() > 2 else xf  # N x C
            size = xf[0, 0].numel()
            count = torch.bincount(gid, minlength=groups).to(xf.dtype)[:, None] * size
            mean = torch.zeros(groups, xf.shape[1], device=x.device).index_add(0, gid, per_image) / count
            centred = xf - mean[gid].view(n, *channel[1:])
            square = (centred * centred).flatten(2).sum(2) if x.dim() > 2 else centred * centred
            var = torch.zeros_like(mean).index_add(0, gid, square) / count
            xhat = centred * torch.rsqrt(var + self.eps)[gid].view(n, *channel[1:])
            first_mean, first_var = mean[0], var[0]
        if self.track_running_stats:
            with torch.no_grad():  # rank 0's statistics, as DDP's buffer broadcast keeps them
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                per_channel = g * xf[0, 0].numel()  # values per channel in the first group
                self.running_mean.lerp_(first_mean.to(self.running_mean.dtype), m)
                self.running_var.lerp_((first_var * per_channel / max(per_channel - 1, 1)).to(self.running_var.dtype), m)
        y = xhat * self.weight.view(channel) + self.bias.view(channel) if self.affine else xhat
        return y.to(out_dtype)


def convert(model: nn.Module) -> nn.Module:
    """Every BatchNorm1d/2d of `model` (not SyncBatchNorm) made a PerGpuBatchNorm with the same
    parameters and statistics; `set_group_size` then sets the images per GPU."""
    for name, child in model.named_children():
        if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)) and not isinstance(child, PerGpuBatchNorm):
            new = PerGpuBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                  child.track_running_stats, device=child.weight.device if child.affine else None)
            new.load_state_dict(child.state_dict())
            setattr(model, name, new)
        else:
            convert(child)
    return model


def set_group_size(model: nn.Module, images_per_gpu: int) -> int:
    """Normalise over groups of `images_per_gpu` from now on (each phase has its own); returns
    how many layers took it."""
    layers = [m for m in model.modules() if isinstance(m, PerGpuBatchNorm)]
    for m in layers:
        m.group_size = images_per_gpu
    return len(layers)
