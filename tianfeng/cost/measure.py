"""`tianfeng calibrate --throughput`: a machine's training step time for a space's model, per
resolution and per-process batch, fitted to the step model of tianfeng.cost.step_time
(step_s = fixed_s + b * image_s), and, measured by several processes (on one node or through the
launcher on several), the allreduce links inside and between nodes. A cluster section with
`device: measured` and `throughput: FILE` then predicts runs with these figures."""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tianfeng.core.files import write_whole
from tianfeng.core.run_config import RunConfig, config_to_dict
from tianfeng.trainers.models import build_model
from tianfeng.trainers.optim import build_optimizer
from tianfeng.trainers.precision import build_precision

log = logging.getLogger("tianfeng.calibrate")


def measure_step(cfg: RunConfig, resolution: int, batch: int, *, in_channels: int, classes: int,
                 steps: int = 8, warmup: int = 2, device: torch.device | None = None) -> float:
    """Mean seconds of one training step of `cfg`'s model and optimizer at `resolution` and
    `batch`, on random inputs, as the engine runs it: the LR set on every group, the loss read
    every step (the divergence check), and one step in `noise_scale_every` run in two halves for
    the gradient noise scale. On a GPU (`device` cuda) the clock is read after the device
    finishes its queued work."""
    from tianfeng.trainers.noise_scale import EpochNoise, measured_backward

    device = device or torch.device("cpu")
    model = build_model(cfg.model, in_channels, classes).to(device)
    optimizer = build_optimizer(model, cfg.optimizer)
    precision = build_precision(cfg.precision, device)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.optimizer.label_smoothing)
    params = [p for p in model.parameters() if p.requires_grad]
    noise = EpochNoise(device)
    every = cfg.noise_scale_every
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, in_channels, resolution, resolution, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            _settle(device)
            start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = cfg.optimizer.lr
        optimizer.zero_grad(set_to_none=True)
        if every and i % every == 0 and batch >= 2:
            loss = measured_backward(model, loss_fn, x, y, precision, params, noise, 1)
        else:
            with precision.autocast():
                loss = loss_fn(model(x), y)
            precision.scaler.scale(loss).backward()
        loss.item()
        precision.scaler.step(optimizer)
        precision.scaler.update()
    _settle(device)
    return (time.perf_counter() - start) / steps


def _settle(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (fixed_s, image_s) of step_s = fixed_s + b * image_s, both kept >= 0."""
    b = np.array([p[0] for p in points], dtype=float)
    s = np.array([p[1] for p in points], dtype=float)
    image_s, fixed_s = np.polyfit(b, s, 1) if len(set(b)) > 1 else (s[0] / b[0], 0.0)
    if fixed_s < 0:  # no measurable fixed part: the line through the origin
        fixed_s, image_s = 0.0, float((b @ s) / (b @ b))
    return float(fixed_s), float(max(image_s, 1e-12))


@dataclass(frozen=True)
class Grid:
    """What every measuring process times: `cfg`'s model at each resolution x per-process batch."""
    cfg: RunConfig
    resolutions: tuple[int, ...]
    batches: tuple[int, ...]
    in_channels: int
    classes: int
    steps: int = 5

    def time(self, device: torch.device) -> list[float]:
        return [measure_step(self.cfg, r, b, in_channels=self.in_channels, classes=self.classes, steps=self.steps,
                             device=device) for r in self.resolutions for b in self.batches]

    def allreduce_bytes(self) -> tuple[int, ...]:
        """The sizes an exchange sends: a latency-bound 64 KiB, DDP's first bucket (1 MiB) and the
        run's bucket (`distributed.bucket_mb`, 25 MiB when auto)."""
        mb = self.cfg.distributed.bucket_mb
        return tuple(sorted({1 << 16, 1 << 20, int((25 if mb == "auto" else mb) * 2**20)}))


def _allreduce_times(group, sizes: tuple[int, ...], device: torch.device, tries: int = 7) -> dict[int, float]:
    """Each size's median allreduce seconds over `group`; every process of the world calls it at
    once (each in its own group), so concurrent groups share the links as a step's rings do."""
    import torch.distributed as dist

    out = {}
    for n in sizes:
        buf = torch.zeros(n // 4, device=device)
        times = []
        for i in range(tries):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(buf, group=group)
            _settle(device)
            if i >= 2:
                times.append(time.perf_counter() - start)
        out[n] = float(np.median(times))
    return out


def tier_ranks(world: int, local_size: int) -> tuple[list[list[int]], list[list[int]]]:
    """The ranks of each node (contiguous) and, between nodes, of each local rank's ring."""
    if world % local_size:
        raise ValueError(f"world {world} is not whole nodes of {local_size} processes")
    nodes = world // local_size
    return ([list(range(n * local_size, (n + 1) * local_size)) for n in range(nodes)],
            [list(range(r, world, local_size)) for r in range(local_size)])


def measure_rank(grid: Grid, device: torch.device, local_size: int) -> dict[str, Any]:
    """One process of an initialised process group whose ranks are contiguous per node (as
    torchrun's rendezvous assigns them): the grid timed with every process at once (they share
    a node as its GPUs do), then allreduces inside each node (all nodes at once) and between
    nodes (one ring per local rank, all at once, as the hierarchical exchange runs them).
    Returns this rank's grid and times; rank 0's times are the ones fitted."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    in_node, across = tier_ranks(world, local_size)
    # every process creates every group, in the same order, as torch.distributed requires; a
    # tier that is the whole world uses the default group (and one of a single rank is not timed)
    node_groups = [dist.new_group(r) if 1 < len(r) < world else None for r in in_node]
    cross_groups = [dist.new_group(r) if 1 < len(r) < world else None for r in across]
    nodes = len(in_node)
    dist.barrier()
    times = grid.time(device)
    dist.barrier()
    sizes = grid.allreduce_bytes()
    intra = _allreduce_times(node_groups[rank // local_size], sizes, device) if local_size > 1 else None
    inter = _allreduce_times(cross_groups[rank % local_size], sizes, device) if nodes > 1 else None
    return {"rank": rank, "grid": times, "intra": intra, "inter": inter}


def fit_ring(processes: int, times: dict[int, float]) -> dict[str, float]:
    """Link figures (Gbit/s, latency us) of a ring allreduce 2 (P-1) (alpha + n / (P beta)) fitted
    to the measured times: what the cost model then uses for that tier's links."""
    n = np.array(sorted(times), dtype=float)
    t = np.array([times[int(k)] for k in n])
    steps = 2 * (processes - 1)
    slope, intercept = np.polyfit(n / processes, t / steps, 1)
    return {"gbit_s": float(8 / max(slope, 1e-15) / 1e9), "latency_us": float(max(intercept, 0.0) * 1e6)}


def fitted_links(processes: int, nodes: int, intra: dict[int, float] | None,
                 inter: dict[int, float] | None) -> dict[str, Any]:
    """The measured tiers: inside a node (a ring of its processes) and between nodes. Between
    nodes one ring per local rank ran at once through the node's adapters, so the node's network
    is their sum: one link of `processes` times a ring's speed, shared by every flow that leaves
    the node (adapters_per_node 1)."""
    out: dict[str, Any] = {"intra": None, "inter": None, "allreduce_s": {}}
    if intra:
        out["intra"] = fit_ring(processes, intra)
        out["allreduce_s"]["intra"] = {str(k): v for k, v in intra.items()}
    if inter:
        ring = fit_ring(nodes, inter)
        out["inter"] = {"gbit_s": ring["gbit_s"] * processes, "latency_us": ring["latency_us"]}
        out["allreduce_s"]["inter"] = {str(k): v for k, v in inter.items()}
    return out


def profile(grid: Grid, times: list[float], *, processes: int, nodes: int, threads: int, backend: str | None,
            links: dict[str, Any] | None, device: torch.device) -> dict[str, Any]:
    """The throughput file's contents: per resolution the fit of the measured step times, and
    the links measured (None where a tier was not: one process, or one node)."""
    fits, points = {}, []
    it = iter(times)
    for r in grid.resolutions:
        measured = []
        for b in grid.batches:
            seconds = next(it)
            measured.append((b, seconds))
            points.append({"resolution": r, "batch": b, "step_s": seconds, "images_per_s": b / seconds,
                           "source": "grid"})
            log.info("%d px, batch %d: %.1f ms a step, %.0f images/s", r, b, 1000 * seconds, b / seconds)
        fixed_s, image_s = fit(measured)
        fits[str(r)] = {"fixed_s": fixed_s, "image_s": image_s}
    return {"kind": "tianfeng-throughput", "host": socket.gethostname(), "processes": processes, "nodes": nodes,
            "threads": threads, "backend": backend, "device": device.type, "links": links,
            "precision": build_precision(grid.cfg.precision, device).mode, "model": config_to_dict(grid.cfg)["model"],
            "in_channels": grid.in_channels, "classes": grid.classes, "fits": fits, "points": points,
            "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def measure_here(grid: Grid, threads: int | None = None, device: torch.device | None = None) -> dict[str, Any]:
    """One process on this machine (default: its GPU when it has one): the step curve, no links."""
    device = device or (torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if threads:
        torch.set_num_threads(threads)
    return profile(grid, grid.time(device), processes=1, nodes=1, threads=threads or torch.get_num_threads(),
                   backend=None, links=None, device=device)


def write_throughput(result: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_whole(path, json.dumps(result, indent=2))
