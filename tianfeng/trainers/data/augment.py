"""Augmentation on whole batches as tensor ops: random-resized-crop or pad-crop, and flips,
expressed as one affine resampling per batch (`affine_grid` + `grid_sample`; for whole-pixel
shifts into channels_last, an equivalent gather).

Random parameters are drawn for the whole global batch from a generator seeded by
(seed, epoch, step), and each rank takes its slice: augmentation does not depend on the world
size, and a resumed run draws exactly what the uninterrupted one drew.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AugmentSpec:
    kind: str  # random_resized_crop | pad_crop | none
    flip: bool
    min_crop_scale: float = 0.35
    pad_fraction: float = 0.125  # pad-crop shift, as a fraction of the side (4 px at 32)

    @property
    def active(self) -> bool:
        return self.kind != "none" or self.flip


def batch_generator(seed: int, epoch: int, step: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed((seed * 1_000_003 + epoch) * 1_000_003 + step)
    return g


def sample_theta(spec: AugmentSpec, n: int, resolution: int, generator: torch.Generator) -> torch.Tensor:
    """(n, 2, 3) affine matrices mapping output to input coordinates in [-1, 1]. The draws come
    from torch's generator; the arithmetic on these few hundred numbers is numpy's, which costs
    a fraction of torch's per-operation overhead (this runs once per batch, in the step's thread)."""
    u = torch.rand(n, 5, generator=generator, dtype=torch.float64).numpy()
    sx, sy = np.ones(n), np.ones(n)
    tx, ty = np.zeros(n), np.zeros(n)
    if spec.kind == "random_resized_crop":
        area = spec.min_crop_scale + (1.0 - spec.min_crop_scale) * u[:, 0]
        ratio = np.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * u[:, 1])
        sx = np.minimum(np.sqrt(area * ratio), 1.0)
        sy = np.minimum(np.sqrt(area / ratio), 1.0)
        tx = (1.0 - sx) * (2.0 * u[:, 2] - 1.0)
        ty = (1.0 - sy) * (2.0 * u[:, 3] - 1.0)
    elif spec.kind == "pad_crop":
        pad = max(1, round(spec.pad_fraction * resolution))
        # whole-pixel shifts keep bilinear sampling exact (no blur)
        dx = np.floor(u[:, 2] * (2 * pad + 1)) - pad
        dy = np.floor(u[:, 3] * (2 * pad + 1)) - pad
        tx, ty = 2.0 * dx / resolution, 2.0 * dy / resolution
    if spec.flip:
        sx = np.where(u[:, 4] < 0.5, -sx, sx)
    theta = np.zeros((n, 2, 3), dtype=np.float32)
    theta[:, 0, 0], theta[:, 0, 2] = sx, tx
    theta[:, 1, 1], theta[:, 1, 2] = sy, ty
    return torch.from_numpy(theta)


def to_normalised(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 NHWC -> float NCHW (channels_last strides), normalised per channel: one conversion
    and one fused multiply-add, in the images' own layout."""
    return torch.addcmul(-mean / std, images.float(), 1.0 / std).permute(0, 3, 1, 2)


def augment(x: torch.Tensor, theta: torch.Tensor | None, resolution: int,
            memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
    """Resample normalised NCHW images through `theta` into `memory_format`; padding is 0, i.e.
    the mean colour."""
    if theta is None:
        if x.shape[-1] != resolution:
            x = F.interpolate(x, size=(resolution, resolution), mode="bilinear", antialias=True,
                              align_corners=False)
        return x.contiguous(memory_format=memory_format)
    grid = F.affine_grid(theta.to(x.device), [x.shape[0], x.shape[1], resolution, resolution],
                         align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.contiguous(memory_format=memory_format)


def normalise_and_augment(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                          theta: torch.Tensor | None, resolution: int,
                          memory_format: torch.memory_format) -> torch.Tensor:
    """uint8 NHWC images -> normalised, augmented float NCHW in `memory_format`. A pad-crop into
    channels_last is a gather of whole pixels: the same result as grid_sample's, 1.25-1.4x
    faster here (no four taps per pixel, no conversion afterwards)."""
    if (theta is not None and memory_format == torch.channels_last
            and tuple(images.shape[1:3]) == (resolution, resolution) and whole_pixel(theta, resolution)):
        return shift_and_flip(images, mean, std, theta)
    return augment(to_normalised(images, mean, std), theta, resolution, memory_format)


def whole_pixel(theta: torch.Tensor, resolution: int) -> bool:
    """Whether `theta` (on the CPU) only flips and shifts by whole pixels, as pad-crop's do."""
    t = theta.numpy()
    shifts = t[:, :, 2] * (resolution / 2)
    return bool((np.abs(t[:, 0, 0]) == 1).all() and (t[:, 1, 1] == 1).all()
                and (t[:, 0, 1] == 0).all() and (t[:, 1, 0] == 0).all()
                and np.abs(shifts - np.round(shifts)).max() < 1e-3)


def shift_and_flip(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                   theta: torch.Tensor) -> torch.Tensor:
    """What normalising and grid_sample make of a whole-pixel `theta`, as one gather: each
    output pixel is one normalised input pixel, or the zero pixel kept after them where the
    shift brings in the outside. Pixels (rows of C values) are gathered in NHWC order, so the
    result is channels_last."""
    n, h, w, c = images.shape
    pixels = torch.empty(n * h * w + 1, c, device=images.device)
    torch.addcmul(-mean / std, images.reshape(n * h * w, c), 1.0 / std, out=pixels[:-1])
    pixels[-1] = 0.0
    theta = theta.to(images.device)
    flip = theta[:, 0, 0] < 0
    dx = (theta[:, 0, 2] * (w / 2)).round().long()
    dy = (theta[:, 1, 2] * (h / 2)).round().long()
    across = torch.arange(w, device=images.device)
    cols = torch.where(flip[:, None], w - 1 - across, across) + dx[:, None]
    rows = torch.arange(h, device=images.device) + dy[:, None]
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
    source = (torch.arange(n, device=images.device)[:, None, None] * (h * w)
              + rows.clamp(0, h - 1)[:, :, None] * w + cols.clamp(0, w - 1)[:, None, :])
    source = torch.where(inside, source, n * h * w)
    return pixels.index_select(0, source.view(-1)).view(n, h, w, c).permute(0, 3, 1, 2)
