"""Predicted wall time and GPU-hours of a run on the space's cluster, before it trains.

Every phase: steps x (one GPU's compute at that phase's resolution and per-GPU batch, plus
the gradient exchange the cost model predicts for the model's gradient size, minus what
overlaps the backward pass), plus one evaluation of the validation split per epoch (a forward
pass: a third of a training step's work per image). Data loading is assumed to keep up
(DALI or pre-decoded data, as the records had)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tianfeng.costmodel import Phase, predict_run
from tianfeng.search.cluster import ClusterSpec
from tianfeng.throughput import (
    DEVICES,
    StepModel,
    reference_step_model,
    scaled_step_model,
    step_cost,
)
from trainers.config import ConfigError, RunConfig

FORWARD_SHARE = 1 / 3  # of a training step's work: what evaluating an image costs


@dataclass(frozen=True)
class WallTime:
    seconds: float  # training and evaluation
    train_s: float
    eval_s: float
    gpu_hours: float
    steps: int
    efficiency: float  # compute / training time: what the exchange leaves of the GPUs
    phases: tuple[tuple[int, int, int], ...] = ()  # (epochs, resolution, global batch) of the run

    def short(self) -> str:
        return f"{format_seconds(self.seconds)}, {self.gpu_hours:.3g} GPU-h"


def format_seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _step_models(cfg: RunConfig, spec: ClusterSpec, in_channels: int, classes: int) -> dict[int, StepModel]:
    """One step model per resolution the run uses."""
    resolutions = sorted({p.resolution for p in cfg.phases})
    if spec.device == "measured":
        return _measured_step_models(cfg, spec, resolutions, in_channels, classes)
    mixed = cfg.precision.mode != "fp32"
    device = DEVICES[spec.device]
    half = device.half_batch if spec.half_batch is None else spec.half_batch
    if spec.images_per_s is not None:  # the user's own figure for this model at its last resolution
        anchor = step_cost(cfg.model, cfg.phases[-1].resolution, in_channels, classes)
        reference = reference_step_model(spec.images_per_s, 256, half)
        return {r: scaled_step_model(reference, step_cost(cfg.model, r, in_channels, classes), anchor)
                for r in resolutions}
    reference = reference_step_model(device.mixed_images_per_s if mixed else device.fp32_images_per_s,
                                     device.batch, half)
    return {r: scaled_step_model(reference, step_cost(cfg.model, r, in_channels, classes)) for r in resolutions}


def _measured_step_models(cfg: RunConfig, spec: ClusterSpec, resolutions: list[int], in_channels: int,
                          classes: int) -> dict[int, StepModel]:
    """This machine's fits (calibrate --throughput), moved to the run's model and to resolutions
    not measured from the nearest measured one, as the cited figures are."""
    from tianfeng.search.cluster import read_throughput
    from trainers.config import ModelConfig

    data = read_throughput(spec.throughput)
    measured_model = ModelConfig(**data["model"])
    fits = {int(r): StepModel(f["fixed_s"], f["image_s"]) for r, f in data["fits"].items()}
    models = {}
    for r in resolutions:
        near = min(fits, key=lambda m: (abs(m - r), m))
        models[r] = scaled_step_model(fits[near], step_cost(cfg.model, r, in_channels, classes),
                                      step_cost(measured_model, near, data.get("in_channels", in_channels),
                                                data.get("classes", classes)))
    return models


def predict_wall_time(cfg: RunConfig, spec: ClusterSpec, *, train_images: int, val_images: int,
                      classes: int, in_channels: int = 3) -> WallTime:
    models = _step_models(cfg, spec, in_channels, classes)
    links = spec.links()
    params = step_cost(cfg.model, cfg.phases[-1].resolution, in_channels, classes).params
    bucket_mb = 25.0 if cfg.distributed.bucket_mb == "auto" else cfg.distributed.bucket_mb
    phases, eval_s, steps = [], 0.0, 0
    val_per_gpu = math.ceil(val_images / spec.gpus)
    for i, p in enumerate(cfg.phases):
        if p.batch_size < spec.gpus:
            raise ConfigError("", f"phases.{i}.batch_size",
                              f"{p.batch_size} is smaller than the cluster's {spec.gpus} GPUs; snap the batch "
                              "to a multiple of them, e.g. `gpus * max(1, round(batch_size / gpus))`")
        per_gpu = math.ceil(p.batch_size / spec.gpus)
        n = p.epochs * max(1, train_images // p.batch_size)
        steps += n
        model = models[p.resolution]
        phases.append(Phase(n, per_gpu, model.step_s(per_gpu)))
        val_steps = math.ceil(val_per_gpu / cfg.data.val_batch_size)
        eval_s += p.epochs * FORWARD_SHARE * (val_steps * model.fixed_s + val_per_gpu * model.image_s)
    run = predict_run(spec.exchange, links, grad_bytes=4.0 * params, phases=phases,
                      bucket_bytes=bucket_mb * 2**20, backward_share=spec.overlap)
    total = run.run_s + eval_s
    return WallTime(total, run.run_s, eval_s, total * spec.gpus / 3600, steps, run.efficiency,
                    tuple((p.epochs, p.resolution, p.batch_size) for p in cfg.phases))


def schedule_text(phases) -> str:
    """`12 ep @16 px x 256` or `4 ep @8 px x 256 -> 8 ep @16 px x 256`."""
    return " -> ".join(f"{e} ep @{r} px x {b}" for e, r, b in phases)


def predict_trial(space, values: dict) -> WallTime:
    """The full-fidelity run of a trial's values on the space's cluster."""
    from tianfeng.search.materialize import build_config
    from trainers.data.sources import open_source

    cfg = build_config(space, values, "target")
    d = cfg.data
    source = open_source(d.source, synthetic_images=d.synthetic_images, synthetic_classes=d.synthetic_classes)
    train = int(len(source.train) * d.fraction)
    val = len(source.val)
    if space.cluster.train_images is not None:  # predicting a larger data set than the one searched
        val = round(val * space.cluster.train_images / max(1, train))
        train = space.cluster.train_images
    return predict_wall_time(cfg, space.cluster, train_images=train, val_images=val,
                             classes=source.num_classes, in_channels=source.channels)
