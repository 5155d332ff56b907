"""BatchNorm statistics over the global batch instead of each rank's share of it.

On CUDA this is torch's SyncBatchNorm. torch's version refuses CPU tensors, so on CPU (gloo)
the layers become `GlobalBatchNorm2d`: the same normalisation with the per-channel sums
all-reduced in the forward pass and the gradient sums all-reduced in the backward pass. With it a
DDP run computes what one process computes on the whole global batch."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from tianfeng.core.errors import ConfigError


class _GlobalBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, group):  # type: ignore[override]
        dims = (0, 2, 3)
        out_dtype, x = x.dtype, x.float()  # statistics in fp32 whatever the autocast dtype
        local = torch.cat([x.sum(dims), (x * x).sum(dims),
                           torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype, device=x.device)])
        dist.all_reduce(local, group=group)
        channels = x.shape[1]
        count = local[-1]
        mean = local[:channels] / count
        var = (local[channels:2 * channels] / count - mean * mean).clamp_min(0.0)
        invstd = torch.rsqrt(var + eps)
        xhat = (x - mean[None, :, None, None]) * invstd[None, :, None, None]
        ctx.save_for_backward(xhat, weight, invstd, count)
        ctx.out_dtype, ctx.group = out_dtype, group
        ctx.mark_non_differentiable(mean, var, count)
        y = xhat * weight[None, :, None, None] + bias[None, :, None, None]
        return y.to(out_dtype), mean, var, count

    @staticmethod
    def backward(ctx, grad_out, _gm, _gv, _gc):  # type: ignore[override]
        xhat, weight, invstd, count = ctx.saved_tensors
        grad_out = grad_out.float()
        dims = (0, 2, 3)
        grad_bias = grad_out.sum(dims)
        grad_weight = (grad_out * xhat).sum(dims)
        # the input gradient needs both sums over the global batch; the parameter gradients stay
        # local, DDP averages them like every other parameter's
        sums = torch.cat([grad_bias, grad_weight])
        dist.all_reduce(sums, group=ctx.group)
        channels = xhat.shape[1]
        mean_dy = (sums[:channels] / count)[None, :, None, None]
        mean_dy_xhat = (sums[channels:] / count)[None, :, None, None]
        grad_x = (weight * invstd)[None, :, None, None] * (grad_out - mean_dy - xhat * mean_dy_xhat)
        return grad_x.to(ctx.out_dtype), grad_weight, grad_bias, None, None


class GlobalBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics span every rank of `group` (None: the world)."""

    group: dist.ProcessGroup | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        y, mean, var, count = _GlobalBatchNormFn.apply(x, self.weight, self.bias, self.eps, self.group)
        with torch.no_grad():  # running statistics as BatchNorm2d keeps them (unbiased variance)
            self.num_batches_tracked.add_(1)
            m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
            self.running_mean.lerp_(mean, m)
            self.running_var.lerp_(var * count / (count - 1).clamp_min(1.0), m)
        return y


def convert(model: nn.Module, device: torch.device, group: dist.ProcessGroup | None = None) -> nn.Module:
    """Every BatchNorm2d of `model` made global across the ranks of `group` (None: all ranks; a
    node's group keeps the statistics' all-reduce off the inter-node network), with its
    parameters and statistics."""
    subclassed = sorted({type(m).__name__ for m in model.modules() if isinstance(m, nn.BatchNorm2d)
                         and type(m) not in (nn.BatchNorm2d, GlobalBatchNorm2d)})
    if subclassed:  # torch's conversion would drop what the subclass adds (an activation, say)
        raise ConfigError("", "distributed.sync_bn", f"cannot make {', '.join(subclassed)} synchronised without "
                          "losing what it adds to BatchNorm; allowed with this model: false (per-GPU BatchNorm)")
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=group)
    for name, child in model.named_children():
        if isinstance(child, nn.BatchNorm2d) and not isinstance(child, GlobalBatchNorm2d):
            if not (child.affine and child.track_running_stats):
                raise ValueError(f"{name}: global BatchNorm needs affine=True and running statistics")
            new = GlobalBatchNorm2d(child.num_features, child.eps, child.momentum, device=child.weight.device)
            new.load_state_dict(child.state_dict())
            new.group = group
            setattr(model, name, new)
        else:
            convert(child, device, group)
    return model
