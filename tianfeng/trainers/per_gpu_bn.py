"""BatchNorm as a cluster computes it, in fewer processes than the cluster has GPUs.

On a cluster each GPU normalises over its own share of the global batch (global batch / GPUs
images), and DDP keeps rank 0's running statistics (it broadcasts the buffers every step). A
proxy trial or promotion that trains the same global batch in one process would normalise over
all of it, a much easier problem at a few images per GPU. `PerGpuBatchNorm` deals a batch to
`groups` GPUs in turn, as `rank_slice` deals a global batch to ranks (image i to GPU i mod
groups), normalises each GPU's images on their own and keeps GPU 0's statistics as the running
ones. Dealt in turn, every micro-batch of an accumulated step (and each half of a noise-scale
step) holds each GPU's own micro-batch, as on the cluster. A batch that does not deal out evenly
gives its last images to the last GPU (the cluster would drop them).

Dealt in turn, a contiguous batch of `groups` x g images is, without a copy, a batch of g images
with `groups` x channels channels: one BatchNorm call computes every GPU's statistics. In
channels_last the GPU index is not next to the channel in memory, so no view makes it one
BatchNorm call; `_ChannelsLastGroups` normalises in that layout instead, with no copy to
contiguous and back, and on a CPU a compiled kernel (grouped_bn_kernel) does the same where it
could be built: one call a layer forward and one backward, autograd node included, which also
moves the running statistics, as torch's own BatchNorm does (at a few pixels an image, a few
small tensor operations per layer would cost as much as the normalisation).

BatchNorm subclasses that do more than normalise (timm's BatchNormAct2d adds the activation)
keep their class: their own forward runs GPU by GPU instead, slower but the same result."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from tianfeng.trainers import grouped_bn_kernel


def dealt(n: int, groups: int) -> list[torch.Tensor]:
    """The images of a batch of `n` each of `groups` GPUs gets: in turn, the rest to the last."""
    whole = n // groups
    if whole == 0:
        raise ValueError(f"a batch of {n} images cannot be shared by {groups} GPUs (fewer than one image each)")
    shares = [torch.arange(r, groups * whole, groups) for r in range(groups)]
    if n > groups * whole:
        shares[-1] = torch.cat([shares[-1], torch.arange(groups * whole, n)])
    return shares


def _gpu_by_gpu(x: torch.Tensor, groups: int, normalise: Callable[[torch.Tensor, bool], torch.Tensor]) -> torch.Tensor:
    """`normalise(images, first)` on each GPU's share, reassembled in the batch's order."""
    if len(x) % groups == 0:  # GPU r's images are every groups-th from r: views, interleaved back
        return torch.stack([normalise(x[r::groups], r == 0) for r in range(groups)], dim=1).flatten(0, 1)
    shares = dealt(len(x), groups)
    out = torch.cat([normalise(x[idx], r == 0) for r, idx in enumerate(shares)])
    return out[torch.argsort(torch.cat(shares))]


class PerGpuBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm1d/2d whose training statistics are per emulated GPU."""

    groups: int = 0  # GPUs the batch is dealt to; 0 or 1: plain BatchNorm over the whole batch

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.groups <= 1:
            return super().forward(x)
        if len(x) % self.groups == 0:
            return self._dealt_evenly(x)
        return _gpu_by_gpu(x, self.groups, self._one_gpu)

    def _momentum(self) -> float:
        self.num_batches_tracked.add_(1)
        return self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)

    def _dealt_evenly(self, x: torch.Tensor) -> torch.Tensor:
        groups, channels, rest = self.groups, x.shape[1], x.shape[2:]
        if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            weight, bias = (self.weight, self.bias) if self.affine else _identity(x, channels)
            if grouped_bn_kernel.usable(x, weight, groups, self.running_mean):
                momentum = self._momentum() if self.track_running_stats else 0.0
                return grouped_bn_kernel.kernel().batch_norm(x, weight, bias, groups, self.eps, self.running_mean,
                                                             self.running_var, momentum)
            y, mean, invstd = _ChannelsLastGroups.apply(x, weight, bias, groups, self.eps)
            mean, invstd, count = mean.flatten(), invstd.flatten(), x.numel() // channels // groups
        else:
            # image j * groups + r is GPU r's j-th: (groups x g, C, ...) viewed as (g, groups x C, ...)
            stacked = x.contiguous().view(len(x) // groups, groups * channels, *rest)
            weight = self.weight.expand(groups, channels).reshape(-1) if self.affine else None
            bias = self.bias.expand(groups, channels).reshape(-1) if self.affine else None
            y, mean, invstd = torch.native_batch_norm(stacked, weight, bias, None, None, True, 0.0, self.eps)
            y = y.view(x.shape)
            count = stacked.numel() // stacked.shape[1]
        if self.track_running_stats:  # GPU 0's, as DDP's buffer broadcast keeps rank 0's
            with torch.no_grad():
                momentum = self._momentum()
                var = (invstd[:channels].double().pow(-2) - self.eps) * (count / max(count - 1, 1))
                self.running_mean.lerp_(mean[:channels].to(self.running_mean.dtype), momentum)
                self.running_var.lerp_(var.to(self.running_var.dtype), momentum)
        return y

    def _one_gpu(self, x: torch.Tensor, first: bool) -> torch.Tensor:
        keeps = first and self.track_running_stats
        momentum = self._momentum() if keeps else 0.0
        return F.batch_norm(x, self.running_mean if keeps else None, self.running_var if keeps else None,
                            self.weight, self.bias, True, momentum, self.eps)


class _ChannelsLastGroups(torch.autograd.Function):
    """Training BatchNorm of a channels_last batch dealt in turn to `groups` GPUs, computed in
    that layout: its (N, H, W, C) memory viewed as (N / groups, groups, H x W, C) (`_grouped`), so
    each GPU's statistics are sums over dims 0 and 2. Returns the output (channels_last) and each
    GPU's mean and 1 / std, (groups, C). Statistics in fp32 (or the input's float64); two
    passes (mean, then squared deviations), as torch's kernels do. The output is written into a
    fresh tensor, not returned as a view: an in-place op on a view (the inplace ReLU next) would
    make autograd copy the whole gradient in backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int, eps: float):
        values = _grouped(x, groups).to(_statistics_dtype(x))
        mean = values.mean(2).mean(0)  # every GPU has as many images: the mean of means is the mean
        out = torch.empty_like(x, memory_format=torch.channels_last)
        centred = torch.sub(values, mean[:, None], out=_grouped(out, groups) if out.dtype == values.dtype else None)
        invstd = torch.rsqrt((centred * centred).mean(2).mean(0) + eps)
        normalised = torch.addcmul(bias, centred, (invstd * weight)[:, None], out=centred)
        if out.dtype != values.dtype:
            _grouped(out, groups).copy_(normalised)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.groups = groups
        ctx.mark_non_differentiable(mean, invstd)
        return out, mean, invstd

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _mean: torch.Tensor, _invstd: torch.Tensor):
        x, weight, mean, invstd = ctx.saved_tensors
        groups = ctx.groups
        grad_values = _grouped(grad.contiguous(memory_format=torch.channels_last), groups).to(mean.dtype)
        centred = _grouped(x, groups).to(mean.dtype) - mean[:, None]
        grad_mean = grad_values.mean(2).mean(0)
        grad_dot_mean = (grad_values * centred).mean(2).mean(0)  # mean of grad x (x - mean), per GPU and channel
        scale = invstd * weight
        # dx = scale * (grad - mean(grad) - (x - mean) * invstd^2 * mean(grad * (x - mean)))
        grad_x = torch.addcmul((-scale * grad_mean)[:, None], centred, (-scale * invstd * invstd * grad_dot_mean)[:, None],
                               out=centred).addcmul_(grad_values, scale[:, None])
        count = x.shape[0] * x.shape[2] * x.shape[3] // groups
        grad_weight = (grad_dot_mean * invstd).sum(0) * count if ctx.needs_input_grad[1] else None
        grad_bias = grad_mean.sum(0) * count if ctx.needs_input_grad[2] else None
        return _ungrouped(grad_x.to(x.dtype), x.shape), grad_weight, grad_bias, None, None


def _identity(x: torch.Tensor, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of a BatchNorm without affine parameters."""
    ones = x.new_ones(channels, dtype=torch.float32)
    return ones, ones * 0


def _statistics_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16/fp16, float64 stays


def _grouped(x: torch.Tensor, groups: int) -> torch.Tensor:
    """A channels_last (N, C, H, W) tensor as (N / groups, groups, H x W, C), without a copy."""
    n, c, h, w = x.shape
    return x.permute(0, 2, 3, 1).view(n // groups, groups, h * w, c)


def _ungrouped(grouped: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    n, c, h, w = shape
    return grouped.view(n, h, w, c).permute(0, 3, 1, 2)


def convert(model: nn.Module) -> nn.Module:
    """Every BatchNorm1d/2d of `model` (not SyncBatchNorm) made a PerGpuBatchNorm with the same
    parameters and statistics, a subclass of theirs grouped in place; `set_groups` then sets
    how many GPUs a batch is dealt to."""
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
    """The layer's own forward, run on each GPU's images; GPU 0's running statistics are kept,
    as DDP keeps rank 0's."""
    plain = layer.forward
    layer.groups = 0

    def one_gpu(x: torch.Tensor, first: bool) -> torch.Tensor:
        if first:
            return plain(x)
        # the other GPUs update scratch copies; autograd saved the originals, left untouched
        kept = dict(layer.named_buffers(recurse=False))
        for name, buffer in kept.items():
            setattr(layer, name, buffer.clone())
        try:
            return plain(x)
        finally:
            for name, buffer in kept.items():
                setattr(layer, name, buffer)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if not layer.training or layer.groups <= 1:
            return plain(x)
        return _gpu_by_gpu(x, layer.groups, one_gpu)

    layer.forward = forward


def set_groups(model: nn.Module, groups: int) -> int:
    """Deal every training batch to `groups` GPUs from now on (0 or 1: BatchNorm over the whole
    batch); returns how many layers took it."""
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and hasattr(m, "groups")]
    for m in layers:
        m.groups = groups
    if groups > 1 and any(t.device.type == "cpu" for m in layers
                          for t in (*m.parameters(recurse=False), *m.buffers(recurse=False))):
        grouped_bn_kernel.kernel()  # built now, not inside the first (maybe timed) training step
    return len(layers)


def emulated_groups(distributed, world: int) -> int:
    """How many groups each process's BatchNorm deals its batch to: its share of the emulated
    GPUs, or of the emulated nodes with node-scope SyncBatchNorm; 0 when there is nothing to
    emulate (as many ranks as GPUs, or SyncBatchNorm over the world, which the process's whole
    batch already computes). `distributed`: the run config's DistributedConfig."""
    if distributed.emulate_gpus <= world:
        return 0
    if distributed.sync_bn:
        if distributed.sync_bn_group:
            return distributed.emulate_gpus // distributed.sync_bn_group // world
        if distributed.sync_bn_scope != "node":
            return 0
        return distributed.emulate_gpus // distributed.emulate_gpus_per_node // world
    return distributed.emulate_gpus // world


@contextlib.contextmanager
def running_stats_kept(model: nn.Module) -> Iterator[None]:
    """Forward passes inside leave every BatchNorm's running statistics and batch count as they
    were: a part of a micro-batch that holds none of emulated GPU 0's images."""
    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    saved = [(m, {name: b.clone() for name, b in m.named_buffers(recurse=False)}) for m in layers]
    try:
        yield
    finally:
        with torch.no_grad():
            for m, buffers in saved:
                for name, b in buffers.items():
                    getattr(m, name).copy_(b)
