"""`tianfeng calibrate --throughput`: this machine's training step time for a space's model, per
resolution and per-process batch, fitted to the step model of tianfeng.throughput
(step_s = fixed_s + b * image_s). A cluster section with `device: measured` and
`throughput: FILE` then predicts runs on this machine, so predictions can be checked here."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from trainers.config import RunConfig, config_to_dict
from trainers.models import build_model
from trainers.optim import build_optimizer
from trainers.precision import build_precision

log = logging.getLogger("tianfeng.calibrate")


def measure_step(cfg: RunConfig, resolution: int, batch: int, *, in_channels: int, classes: int,
                 steps: int = 5, warmup: int = 2) -> float:
    """Median seconds of one training step (forward, backward, optimizer) of `cfg`'s model and
    optimizer at `resolution` and `batch`, on random inputs, as the engine runs it on CPU."""
    device = torch.device("cpu")
    model = build_model(cfg.model, in_channels, classes).to(device)
    optimizer = build_optimizer(model, cfg.optimizer)
    precision = build_precision(cfg.precision, device)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.optimizer.label_smoothing)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, in_channels, resolution, resolution, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with precision.autocast():
            loss = loss_fn(model(x), y)
        precision.scaler.scale(loss).backward()
        precision.scaler.step(optimizer)
        precision.scaler.update()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (fixed_s, image_s) of step_s = fixed_s + b * image_s, both kept >= 0."""
    b = np.array([p[0] for p in points], dtype=float)
    s = np.array([p[1] for p in points], dtype=float)
    image_s, fixed_s = np.polyfit(b, s, 1) if len(set(b)) > 1 else (s[0] / b[0], 0.0)
    if fixed_s < 0:  # no measurable fixed part: the line through the origin
        fixed_s, image_s = 0.0, float((b @ s) / (b @ b))
    return float(fixed_s), float(max(image_s, 1e-12))


def measure_throughput(cfg: RunConfig, resolutions: list[int], batches: list[int], *, in_channels: int,
                       classes: int, steps: int = 5) -> dict:
    fits, points = {}, []
    for r in resolutions:
        measured = []
        for b in batches:
            seconds = measure_step(cfg, r, b, in_channels=in_channels, classes=classes, steps=steps)
            measured.append((b, seconds))
            points.append({"resolution": r, "batch": b, "step_s": seconds, "images_per_s": b / seconds})
            log.info("%d px, batch %d: %.1f ms a step, %.0f images/s", r, b, 1000 * seconds, b / seconds)
        fixed_s, image_s = fit(measured)
        fits[str(r)] = {"fixed_s": fixed_s, "image_s": image_s}
    return {"kind": "tianfeng-throughput", "host": socket.gethostname(), "threads": torch.get_num_threads(),
            "precision": cfg.precision.mode, "model": config_to_dict(cfg)["model"], "in_channels": in_channels,
            "classes": classes, "fits": fits, "points": points,
            "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_throughput(result: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    return path
