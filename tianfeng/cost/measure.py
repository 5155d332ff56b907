"""`tianfeng calibrate --throughput`: this machine's training step time for a space's model, per
resolution and per-process batch, fitted to the step model of tianfeng.cost.step_time
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

from tianfeng.trainers.config import RunConfig, config_to_dict
from tianfeng.trainers.models import build_model
from tianfeng.trainers.optim import build_optimizer
from tianfeng.trainers.precision import build_precision

log = logging.getLogger("tianfeng.calibrate")


def measure_step(cfg: RunConfig, resolution: int, batch: int, *, in_channels: int, classes: int,
                 steps: int = 8, warmup: int = 2) -> float:
    """Mean seconds of one training step of `cfg`'s model and optimizer at `resolution` and
    `batch`, on random inputs, as the engine runs it on CPU: the LR set on every group, the loss
    read every step (the divergence check), and one step in `noise_scale_every` run in two
    halves for the gradient noise scale."""
    from tianfeng.trainers.noise_scale import EpochNoise, measured_backward

    device = torch.device("cpu")
    model = build_model(cfg.model, in_channels, classes).to(device)
    optimizer = build_optimizer(model, cfg.optimizer)
    precision = build_precision(cfg.precision, device)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.optimizer.label_smoothing)
    params = [p for p in model.parameters() if p.requires_grad]
    noise = EpochNoise(device)
    every = cfg.noise_scale_every
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, in_channels, resolution, resolution, generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
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
    return (time.perf_counter() - start) / steps


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (fixed_s, image_s) of step_s = fixed_s + b * image_s, both kept >= 0."""
    b = np.array([p[0] for p in points], dtype=float)
    s = np.array([p[1] for p in points], dtype=float)
    image_s, fixed_s = np.polyfit(b, s, 1) if len(set(b)) > 1 else (s[0] / b[0], 0.0)
    if fixed_s < 0:  # no measurable fixed part: the line through the origin
        fixed_s, image_s = 0.0, float((b @ s) / (b @ b))
    return float(fixed_s), float(max(image_s, 1e-12))


def _grid(cfg: RunConfig, resolutions: list[int], batches: list[int], in_channels: int, classes: int,
          steps: int) -> list[float]:
    return [measure_step(cfg, r, b, in_channels=in_channels, classes=classes, steps=steps)
            for r in resolutions for b in batches]


def _rank(rank: int, processes: int, port: int, threads: int, args: tuple, out) -> None:
    """One of `processes` ranks timing the grid at once (they share the machine as emulated
    GPUs do), then gloo allreduces of a few sizes among them."""
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=processes)
    try:
        dist.barrier()
        grid = _grid(*args)
        dist.barrier()
        exchange = {}
        for n in ALLREDUCE_BYTES:
            buf = torch.zeros(n // 4)
            times = []
            for i in range(7):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(buf)
                if i >= 2:
                    times.append(time.perf_counter() - start)
            exchange[n] = float(np.median(times))
        out.put((rank, grid, exchange))
    finally:
        dist.destroy_process_group()


ALLREDUCE_BYTES = (1 << 16, 1 << 20, 1 << 23)


def _concurrent(processes: int, threads: int, args: tuple) -> tuple[list[float], dict[int, float]]:
    """Each grid point's median over the ranks, and each allreduce size's rank-0 time."""
    import multiprocessing

    from tianfeng.trainers.ports import free_port

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, processes, port, threads, args, out)) for r in range(processes)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=1800) for _ in procs)
    for p in procs:
        p.join()
    grid = [float(np.median(values)) for values in zip(*(r[1] for r in results), strict=True)]
    return grid, results[0][2]


def fit_ring(processes: int, times: dict[int, float]) -> dict[str, float]:
    """Link figures (Gbit/s, latency us) of a ring allreduce 2 (P-1) (alpha + n / (P beta)) fitted
    to the measured times: what the cost model then uses for every link of this machine."""
    n = np.array(sorted(times), dtype=float)
    t = np.array([times[int(k)] for k in n])
    steps = 2 * (processes - 1)
    slope, intercept = np.polyfit(n / processes, t / steps, 1)
    return {"gbit_s": float(8 / max(slope, 1e-15) / 1e9), "latency_us": float(max(intercept, 0.0) * 1e6)}


def measure_throughput(cfg: RunConfig, resolutions: list[int], batches: list[int], *, in_channels: int,
                       classes: int, steps: int = 5, processes: int = 1, threads: int | None = None) -> dict:
    """Per-process step times (with `processes` ranks at once, each on `threads` threads, as
    emulated nodes run), fitted per resolution; with more than one, gloo's link figures too."""
    args = (cfg, resolutions, batches, in_channels, classes, steps)
    links = None
    if processes > 1:
        threads = threads or 1  # as `launch --device cpu` runs each rank (OMP_NUM_THREADS=1)
        grid, exchange = _concurrent(processes, threads, args)
        links = fit_ring(processes, exchange)
        log.info("gloo allreduce over %d processes: %s -> %.2f Gbit/s, %.0f us a step", processes,
                 ", ".join(f"{n >> 10} kB {1000 * s:.1f} ms" for n, s in exchange.items()),
                 links["gbit_s"], links["latency_us"])
    else:
        if threads:
            torch.set_num_threads(threads)
        grid = _grid(*args)
    fits, points = {}, []
    it = iter(grid)
    for r in resolutions:
        measured = []
        for b in batches:
            seconds = next(it)
            measured.append((b, seconds))
            points.append({"resolution": r, "batch": b, "step_s": seconds, "images_per_s": b / seconds})
            log.info("%d px, batch %d: %.1f ms a step, %.0f images/s", r, b, 1000 * seconds, b / seconds)
        fixed_s, image_s = fit(measured)
        fits[str(r)] = {"fixed_s": fixed_s, "image_s": image_s}
    return {"kind": "tianfeng-throughput", "host": socket.gethostname(), "processes": processes,
            "threads": threads or torch.get_num_threads(), "links": links,
            "precision": build_precision(cfg.precision, torch.device("cpu")).mode, "model": config_to_dict(cfg)["model"], "in_channels": in_channels,
            "classes": classes, "fits": fits, "points": points,
            "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def write_throughput(result: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    return path
