"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, "An Empirical
Model of Large-Batch Training", appendix A): the batch size around which larger batches stop
buying proportionally fewer steps. Estimated from the squared norms of gradients averaged over
two batch sizes, which every DDP step already has (one rank's share and the global batch), or
one process gets from micro-batches.

With |g_B|^2 the squared norm of a gradient averaged over B examples, E|g_B|^2 = |G|^2 + tr(Sigma)/B,
so two batch sizes give unbiased estimates of both terms; their ratio is biased for few samples,
so the two terms are averaged (exponentially, over steps) before dividing, as the paper does."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import NamedTuple

import torch

from tianfeng.trainers.per_gpu_bn import running_stats_kept


def unbiased_terms(small_sq: float, big_sq: float, b_small: int, b_big: int) -> tuple[float, float]:
    """(|G|^2, tr(Sigma)) from one pair of squared gradient norms at batch sizes b_small < b_big."""
    if not 0 < b_small < b_big:
        raise ValueError(f"need 0 < b_small < b_big, got {b_small}, {b_big}")
    g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
    return g2, trace


@dataclass
class NoiseScale:
    """Running estimate: each step adds one pair of squared norms; `value` is B_simple from the
    exponentially averaged terms (None until |G|^2 is positive)."""
    decay: float = 0.95  # the paper's smoothing of both terms over steps
    g2: float | None = None
    trace: float | None = None

    def update(self, small_sq: float, big_sq: float, b_small: int, b_big: int) -> None:
        g2, trace = unbiased_terms(small_sq, big_sq, b_small, b_big)
        if self.g2 is None:
            self.g2, self.trace = g2, trace
        else:
            self.g2 = self.decay * self.g2 + (1 - self.decay) * g2
            self.trace = self.decay * self.trace + (1 - self.decay) * trace

    @property
    def value(self) -> float | None:
        if self.g2 is None or self.g2 <= 0:
            return None
        return self.trace / self.g2


def squared_grad_norm(params: list) -> torch.Tensor:
    """The squared norm of all gradients as a device scalar (no host sync)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.stack([n.float() for n in torch._foreach_norm(grads)]).square().sum()


class EpochNoise:
    """The epoch's sums of both unbiased terms, on the device, from every measured step; each
    rank's small-batch norm is its own, so the world's sums average them (linear terms). Each
    epoch's per-step means join an average over epochs (weight `decay` on the past), as the paper
    smooths its estimates: one epoch's few measured steps give a noisy ratio."""

    def __init__(self, device: torch.device, decay: float = 0.5) -> None:
        self.device, self.decay = device, decay
        self.smoothed: tuple[float, float] | None = None  # (|G|^2, tr(Sigma)) per measured step
        self.reset()

    def reset(self) -> None:
        self.sums = torch.zeros(3, device=self.device)  # |G|^2, tr(Sigma), measured steps

    def add(self, small_sq: torch.Tensor, big_sq: torch.Tensor, b_small: int, b_big: int) -> None:
        g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
        trace = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
        ok = torch.isfinite(g2) & torch.isfinite(trace)  # an fp16 overflow step says nothing
        zero = torch.zeros((), device=self.device)
        self.sums += torch.stack([torch.where(ok, g2, zero), torch.where(ok, trace, zero), ok.float()])

    def value(self, world_sums: list[float]) -> float | None:
        """B_simple after this epoch, from the world's summed terms (None until a step was
        measured and the smoothed |G|^2 is positive)."""
        g2, trace, steps = world_sums
        if steps > 0:
            mean = (g2 / steps, trace / steps)
            self.smoothed = mean if self.smoothed is None else tuple(
                self.decay * old + (1 - self.decay) * new for old, new in zip(self.smoothed, mean, strict=True))
        if self.smoothed is None or self.smoothed[0] <= 0:
            return None
        return self.smoothed[1] / self.smoothed[0]


class Part(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    first: bool = True  # holds emulated GPU 0's images, whose BatchNorm statistics are kept


def micro_batches(x: torch.Tensor, y: torch.Tensor, chunks: int, split: int = 1,
                  groups: int = 0) -> list[Part]:
    """The batch in `chunks` micro-batches, each in `split` parts for this device's memory. A
    micro-batch is dealt in turn to `groups` emulated GPUs (per_gpu_bn); part j holds the images
    of its j-th share of those GPUs, in an order that deals them to the same GPUs again, so
    BatchNorm (set to groups / split) sees each GPU's images as unsplit, and only the part with
    GPU 0 updates the running statistics. Without whole GPUs to share out, plain slices."""
    out: list[Part] = []
    for xm, ym in zip(x.tensor_split(chunks), y.tensor_split(chunks), strict=True):
        n = len(ym)
        if split == 1 or groups < 2 or groups % split or n % groups:
            out.extend(Part(xp, yp) for xp, yp in zip(xm.tensor_split(split), ym.tensor_split(split), strict=True))
            continue
        per, last = groups // split, torch.channels_last if xm.is_contiguous(memory_format=torch.channels_last) else None
        xs, ys = xm.view(n // groups, groups, *xm.shape[1:]), ym.view(n // groups, groups)
        for j in range(split):
            xp = xs[:, j * per:(j + 1) * per].flatten(0, 1)
            out.append(Part(xp.contiguous(memory_format=last) if last is not None else xp,
                            ys[:, j * per:(j + 1) * per].flatten(0, 1), first=j == 0))
    return out


def _chunk_backward(model, loss_fn, parts: list[Part], precision,
                    after: int | None = None, at_after=None) -> torch.Tensor:
    """Forward and backward each (images, labels) part, each loss weighted by its share of the
    batch, so the accumulated gradient is the whole batch's; every part but the last keeps its
    gradient local (DDP's no_sync), so the exchange runs once. `at_after()` is called once the
    first `after` parts are done. Returns the batch's mean loss (detached)."""
    n = sum(len(part.y) for part in parts)
    no_sync = model.no_sync if hasattr(model, "no_sync") else contextlib.nullcontext
    total: torch.Tensor | float = 0.0
    for i, (xc, yc, first) in enumerate(parts):
        with no_sync() if i < len(parts) - 1 else contextlib.nullcontext():
            with precision.autocast(), contextlib.nullcontext() if first else running_stats_kept(model):
                loss = loss_fn(model(xc), yc)
            precision.scaler.scale(loss * (len(yc) / n)).backward()  # DDP averages the world's at the last
        total = total + loss.detach() * len(yc)  # in the loss's own precision
        if at_after is not None and i + 1 == after:
            at_after()
    return total / n


def accumulated_backward(model, loss_fn, x: torch.Tensor, y: torch.Tensor, precision, chunks: int,
                         split: int = 1, groups: int = 0) -> torch.Tensor:
    """Gradient accumulation: the batch in `chunks` micro-batches (each in `split` parts, see
    micro_batches), one exchange per step."""
    return _chunk_backward(model, loss_fn, micro_batches(x, y, chunks, split, groups), precision)


def measured_backward(model, loss_fn, x: torch.Tensor, y: torch.Tensor, precision, params: list,
                      noise: EpochNoise, world: int, chunks: int = 2, split: int = 1,
                      groups: int = 0) -> torch.Tensor:
    """Forward and backward in micro-batches (two, or the accumulation's, if more), each loss
    weighted by its share, so the accumulated gradient is the full batch's (the optimizer sees the
    same step); the gradient after the first half of them, kept local (DDP's no_sync), is the
    small-batch one. Returns the batch's mean loss."""
    n = len(y)
    # the step's own micro-batches and parts when there are two or more (each part whole GPUs, as
    # every other step has them); else the batch in halves
    parts = micro_batches(x, y, chunks, split, groups) if chunks * split >= 2 else micro_batches(x, y, 2)
    first = len(parts) // 2
    half = sum(len(part.y) for part in parts[:first])
    unscale = precision.scaler._get_scale_async() if precision.scaler.is_enabled() else None
    small: list[torch.Tensor] = []
    loss = _chunk_backward(model, loss_fn, parts, precision, after=first,
                           at_after=lambda: small.append(squared_grad_norm(params) * (n / half) ** 2))
    big_sq = squared_grad_norm(params)
    small_sq = small[0]
    if unscale is not None:
        small_sq, big_sq = small_sq / unscale**2, big_sq / unscale**2
    noise.add(small_sq, big_sq, half, n * world)
    return loss
