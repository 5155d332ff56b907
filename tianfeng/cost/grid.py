"""A run's predicted wall time at several GPU counts for each gradient exchange, part by part,
and whether its per-GPU batch fits the GPU: what `tianfeng plan` tabulates."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import RunConfig
from tianfeng.cost.cluster import ClusterSpec, checked
from tianfeng.cost.exchange import VARIANTS
from tianfeng.cost.walltime import check_memory, predict_wall_time

GPU_COUNTS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class WallTimeGrid:
    config: RunConfig
    cluster: ClusterSpec  # at the GPU count asked for, flat exchange
    rows: list[dict[str, Any]]  # a GPU count and an exchange each, fewest GPUs first


def wall_time_grid(cfg: RunConfig, cluster: ClusterSpec, *, train_images: int, val_images: int, classes: int,
                   source: str, in_channels: int = 3) -> WallTimeGrid:
    """Every count of GPU_COUNTS up to the cluster's (and the smallest phase batch), and the
    cluster's own, for each exchange variant."""
    smallest = min(p.batch_size for p in cfg.phases)
    counts = sorted({g for g in GPU_COUNTS if g <= min(cluster.gpus, smallest)} | {cluster.gpus})
    rows = []
    for gpus in counts:
        for variant in VARIANTS:
            spec = checked(replace(cluster, gpus=gpus, gpus_per_node=min(cluster.gpus_per_node, gpus),
                                   exchange=variant), "command line", prefix="--")
            try:
                check_memory(cfg, spec, in_channels=in_channels, classes=classes, source=source)
                fits = "fits"
            except ConfigError as exc:
                fits = exc.message
            w = predict_wall_time(cfg, spec, train_images=train_images, val_images=val_images, classes=classes,
                                  in_channels=in_channels)
            images = sum(p.epochs * (train_images // p.batch_size) * p.batch_size for p in cfg.phases)
            rows.append({"gpus": gpus, "variant": variant, "seconds": w.seconds, "gpu_hours": w.gpu_hours,
                         "steps": w.steps, "samples_per_s": images / w.train_s, "efficiency": w.efficiency,
                         "parts": w.parts, "notes": list(w.notes), "memory": fits})
    at_target = replace(cluster, gpus_per_node=min(cluster.gpus_per_node, cluster.gpus), exchange="flat")
    return WallTimeGrid(cfg, at_target, rows)
