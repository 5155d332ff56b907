"""Predicted wall time and GPU-hours of a run on a cluster, before it trains: the one model
behind `plan`, the search's objective, `promote` and the report.

Every cost a first run pays, each a line of the breakdown:
- start-up: launch (interpreter, torch and the CUDA context, data index, model), the
  rendezvous and NCCL's communicator set-up (growing with the ranks), and one warm-up per
  distinct step shape (cuDNN's autotune, or a cold torch.compile when the run compiles);
- compute: steps x (one GPU's forward and backward at that phase's resolution and per-GPU
  batch: a fixed part plus a part per image, tianfeng.cost.step_time); with gradient accumulation,
  each micro-batch pays the fixed part and only the last one's backward hides the exchange;
- optimizer: what LARS's and LAMB's extra passes over the weights cost beyond the SGD step the
  throughput figures include (memory-bound: bytes over the device's memory bandwidth);
- noise scale: the steps that run in two halves to measure it pay a second fixed part, two
  gradient norms, and the first half's backward without an overlapping exchange;
- exchange: the gradient allreduce not hidden behind the backward pass (tianfeng.cost.exchange),
  and SyncBatchNorm's blocking per-layer collectives when the run uses it;
- data wait: when the loader cores of a GPU decode and augment slower than the step;
- evaluation: one forward pass over the validation split per epoch (a third of a training
  step's work per image);
- checkpoints: weights and optimizer state written by rank 0 while the others wait."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import RunConfig
from tianfeng.cost.cluster import ClusterSpec
from tianfeng.cost.exchange import allreduce_s, step_seconds
from tianfeng.cost.memory import OPTIMIZER_STATES, per_gpu_fit
from tianfeng.cost.step_time import (
    DEVICES,
    STACKS,
    StepCost,
    StepModel,
    reference_step_model,
    scaled_step_model,
    step_cost,
)

FORWARD_SHARE = 1 / 3  # of a training step's work: what evaluating an image costs

# Start-up. Assumptions (no cited figure covers them; `plan --json` shows each term so a user
# can replace them by their cluster's): launching a rank and building the run before its first
# step, NCCL's set-up plus a share per rank (its bootstrap exchanges every rank's address), one
# cuDNN autotune per distinct step shape (cudnn.benchmark), and a cold torch.compile per shape
# (trainers/compilation.py's prior for GPUs).
LAUNCH_S = 20.0
NCCL_INIT_S = 2.0
NCCL_INIT_PER_RANK_S = 0.005
AUTOTUNE_S = 5.0
COMPILE_S = 60.0

# An optimizer step streams these fp32 tensors per parameter through device memory (reads and
# writes): SGD with momentum reads weight, gradient and momentum and writes weight and momentum;
# LARS adds a read of weight and gradient for the per-layer norms; LAMB reads and writes two
# moments and reads weight and update again for its norms. The throughput figures include SGD's.
OPTIMIZER_PASSES = {"sgd": 5, "lars": 7, "lamb": 9}

# Checkpoints: rank 0 writes weights and optimizer state; 1 GB/s is an assumption (a node's
# local NVMe writes faster, a shared file system under load slower).
CHECKPOINT_GB_S = 1.0

# The data pipelines' CPU time per image and core: fixed + per output pixel. cache and torch
# measured by benchmarks/cost/loader_rates.py (one thread, 500 x 375 JPEGs, 128/224/288 px) on
# 2026-11-25 at commit 1c9e4c7 on a 2-core AMD EPYC VM: cache (pre-decoded, batched
# normalise + random-resized-crop) 572/286/203 img/s per core, torch (PIL decode + resize, then
# the same augmentation) 1 / (1/decode + 1/augment) with decode 867/403/343 img/s. A cluster's
# cores differ; these are the model's figures until a user measures their own.
LOADER_S = {  # (seconds per image, seconds per output pixel), one core
    "cache": (0.97e-3, 4.8e-8),
    "torch": (0.97e-3 + 0.71e-3, 4.8e-8 + 2.66e-8),
}

# DALI decodes and augments on the GPU; its CPU keeps reading the encoded images and the share
# of JPEG decoding (the Huffman stage) that the GPU's hardware decoder does not take. Both parts
# from NVIDIA's MLPerf ResNet-50 runs on one node, whose configs give DALI 6 threads a GPU
# (DALI_THREADS) and whose GPUs, not their loaders, bounded them: DGX A100 with the hardware
# decoder off (DALI_HW_DECODER_LOAD=0) trained 3,293 img/s a GPU (training_results_v1.1
# dgxa100_ngc21.09_mxnet), so reading and decoding take at most 6 / 3,293 s per image and
# thread; DGX H100 with 99% of the decoding on the hardware decoder trained 7,055 (v3.1
# eos_ngc23.09_mxnet), so reading and the 1% left take at most 6 / 7,055 s. Those bounds, taken
# as the figures: an upper estimate of the CPU's part (both runs read packed RecordIO files,
# which costs less than one file per image).
DALI_UPPER_S = 6 / 3293.2  # reading + decoding on the CPU
DALI_HW_UPPER_S = 6 / 7054.7  # reading + 1% of the decoding, at DALI_HW_DECODER_LOAD 0.99
DALI_DECODE_S = (DALI_UPPER_S - DALI_HW_UPPER_S) / 0.99  # the decoding a hardware decoder can take
DALI_READ_S = DALI_UPPER_S - DALI_DECODE_S

PARTS = ("startup", "compute", "optimizer", "noise_scale", "exchange", "sync_bn", "data_wait", "evaluation",
         "checkpoints")


@dataclass(frozen=True)
class WallTime:
    seconds: float  # every part below
    train_s: float  # the training steps: compute, optimizer, noise scale, exchange, sync_bn, data wait
    eval_s: float
    gpu_hours: float
    steps: int
    efficiency: float  # compute / training time: what the exchange and the data leave of the GPUs
    phases: tuple[tuple[int, int, int], ...] = ()  # (epochs, resolution, global batch) of the run
    parts: dict[str, float] = field(default_factory=dict)  # PARTS -> seconds
    notes: tuple[str, ...] = ()  # what bounds the run, in words (data-bound phases)

    def short(self) -> str:
        return f"{format_seconds(self.seconds)}, {self.gpu_hours:.3g} GPU-h"


def parts_text(parts: dict[str, float]) -> str:
    """`compute 12.1 min, exchange 1.2 min, ...`: the non-zero parts of a prediction, largest first."""
    ordered = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)
    return ", ".join(f"{k.replace('_', ' ')} {format_seconds(v)}" for v, k in ordered)


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
    rate = (device.mixed_images_per_s if mixed else device.fp32_images_per_s) * STACKS[spec.stack].factor
    reference = reference_step_model(rate, device.batch, half)
    return {r: scaled_step_model(reference, step_cost(cfg.model, r, in_channels, classes)) for r in resolutions}


def _measured_step_models(cfg: RunConfig, spec: ClusterSpec, resolutions: list[int], in_channels: int,
                          classes: int) -> dict[int, StepModel]:
    """This machine's fits (calibrate --throughput), moved to the run's model and to resolutions
    not measured from the nearest measured one, as the cited figures are."""
    from tianfeng.core.run_config import ModelConfig
    from tianfeng.cost.cluster import read_throughput

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


def loader_images_per_s(spec: ClusterSpec, resolution: int) -> float:
    """What one GPU's loader cores deliver at a resolution."""
    if spec.loader == "dali":
        return spec.loader_cores / (DALI_READ_S + (1 - spec.decoder_load) * DALI_DECODE_S)
    fixed, per_pixel = LOADER_S[spec.loader]
    return spec.loader_cores / (fixed + per_pixel * resolution * resolution)


def startup_seconds(cfg: RunConfig, spec: ClusterSpec) -> float:
    shapes = {(p.resolution, math.ceil(p.batch_size / spec.gpus)) for p in cfg.phases}
    shapes |= {(p.resolution, cfg.data.val_batch_size) for p in cfg.phases}  # evaluation's own shapes
    nccl = NCCL_INIT_S + NCCL_INIT_PER_RANK_S * spec.gpus if spec.gpus > 1 else 0.0
    warm = COMPILE_S if cfg.engine.compile == "on" else AUTOTUNE_S
    return LAUNCH_S + nccl + warm * len(shapes)


def sync_bn_seconds(cfg: RunConfig, spec: ClusterSpec, cost: StepCost) -> float:
    """One step's SyncBatchNorm collectives: per BN layer, the statistics in the forward pass and
    their gradients in the backward, each a small allreduce on the critical path."""
    if not cfg.distributed.sync_bn or spec.gpus <= 1:
        return 0.0
    links = spec.links()
    if cfg.distributed.sync_bn_group:  # a few GPUs of a node: small allreduces inside it
        links = replace(links, gpus=min(cfg.distributed.sync_bn_group, spec.gpus))
    elif cfg.distributed.sync_bn_scope == "node":
        links = replace(links, gpus=links.local)
    return sum(allreduce_s(4.0 * (2 * c + 1), links) + allreduce_s(4.0 * 2 * c, links) for c in cost.norm_channels)


def check_batches(cfg: RunConfig, spec: ClusterSpec) -> None:
    """Every GPU of the cluster gets at least one image of every phase's batch."""
    for i, p in enumerate(cfg.phases):
        if p.batch_size < spec.gpus:
            raise ConfigError("", f"phases.{i}.batch_size",
                              f"{p.batch_size} is smaller than the cluster's {spec.gpus} GPUs; give every GPU an "
                              "image: snap the batch to a multiple of them, e.g. `gpus * max(1, round(batch_size "
                              "/ gpus))` in phases.batch_size")


def check_memory(cfg: RunConfig, spec: ClusterSpec, *, in_channels: int, classes: int, source: str = "") -> None:
    """Every phase's per-GPU batch fits the device's memory: one line naming the phase and the limit."""
    memory = spec.device_memory_gib
    if memory is None:
        return
    mixed = cfg.precision.mode != "fp32"
    k = cfg.accumulate_steps
    for i, p in enumerate(cfg.phases):
        per_gpu = math.ceil(p.batch_size / spec.gpus)
        micro = math.ceil(per_gpu / k)  # what is in memory at once
        params = step_cost(cfg.model, p.resolution, in_channels, classes).params
        fit = per_gpu_fit(cfg.model, p.resolution, mixed=mixed, optimizer=cfg.optimizer.name, memory_gib=memory,
                          params=params, in_channels=in_channels, classes=classes)
        if micro > fit.max_per_gpu:
            what = f"{per_gpu} images per GPU" + (f" in {k} micro-batches of {micro}" if k > 1 else "")
            raise ConfigError(source, f"phases.{i}.batch_size",
                              f"{p.batch_size} is {what} on {spec.gpus} GPUs; at {p.resolution} px "
                              f"a {memory:g} GiB GPU holds at most {fit.max_per_gpu} ({fit.describe(memory)}); "
                              f"cluster.memory_gib sets the memory, accumulate_steps splits the batch")


def predict_wall_time(cfg: RunConfig, spec: ClusterSpec, *, train_images: int, val_images: int,
                      classes: int, in_channels: int = 3, startup: bool = True) -> WallTime:
    """`startup=False` leaves the start-up out (benchmarks timed from the first step, as MLPerf's)."""
    models = _step_models(cfg, spec, in_channels, classes)
    links = spec.links()
    cost = step_cost(cfg.model, cfg.phases[-1].resolution, in_channels, classes)
    params = cost.params
    grad_bytes = 4.0 * params
    bucket_bytes = (25.0 if cfg.distributed.bucket_mb == "auto" else cfg.distributed.bucket_mb) * 2**20
    device = DEVICES.get(spec.device)
    memory_s = 4.0 * params / (device.memory_gb_s * 1e9) if device else 0.0  # one fp32 pass over the weights
    optimizer_s = (OPTIMIZER_PASSES[cfg.optimizer.name] - OPTIMIZER_PASSES["sgd"]) * memory_s
    sync_bn_s = sync_bn_seconds(cfg, spec, cost)
    parts = dict.fromkeys(PARTS, 0.0)
    notes: list[str] = []
    steps = 0
    val_per_gpu = math.ceil(val_images / spec.gpus)
    check_batches(cfg, spec)
    k = cfg.accumulate_steps
    for i, p in enumerate(cfg.phases):
        per_gpu = math.ceil(p.batch_size / spec.gpus)
        per_epoch = max(1, train_images // p.batch_size)
        n = p.epochs * per_epoch
        steps += n
        model = models[p.resolution]
        # accumulation: k micro-batches, each paying the fixed part; the exchange starts with
        # the last one's backward pass, the only one it can hide behind
        chunks = min(k, per_gpu)
        micro = model.step_s(math.ceil(per_gpu / chunks))
        compute = chunks * micro
        step, comm = step_seconds(spec.exchange, links, grad_bytes=grad_bytes, compute_s=micro,
                                  bucket_bytes=bucket_bytes, backward_share=spec.overlap)
        exposed = step - micro
        # the noise-scale steps: two half batches (a second fixed part, two gradient norms), the
        # first half's backward kept local, so only the second half's can hide the exchange;
        # micro-batches of an accumulation are already such halves: only the norms are extra
        measured = p.epochs * math.ceil(per_epoch / cfg.noise_scale_every) if cfg.noise_scale_every else 0
        measured = measured if per_gpu >= 2 else 0
        if chunks > 1:
            noise_extra = 2 * memory_s
        else:
            half_step, _ = step_seconds(spec.exchange, links, grad_bytes=grad_bytes, compute_s=compute,
                                        bucket_bytes=bucket_bytes, backward_share=spec.overlap / 2)
            noise_extra = model.fixed_s + 2 * memory_s + (half_step - step)
        busy = compute + optimizer_s + sync_bn_s + exposed  # a step's time when data keeps up
        data = per_gpu / loader_images_per_s(spec, p.resolution)
        wait = max(0.0, data - busy)
        if wait > 0:
            notes.append(f"phase {i} is data-bound: {spec.loader} on {spec.loader_cores:g} cores per GPU delivers "
                         f"{loader_images_per_s(spec, p.resolution):,.0f} img/s at {p.resolution} px, the GPU "
                         f"takes {per_gpu / busy:,.0f}")
        parts["compute"] += n * compute
        parts["optimizer"] += n * optimizer_s
        parts["noise_scale"] += measured * noise_extra
        parts["exchange"] += n * exposed
        parts["sync_bn"] += n * sync_bn_s
        parts["data_wait"] += n * wait
        val_steps = math.ceil(val_per_gpu / cfg.data.val_batch_size)
        parts["evaluation"] += p.epochs * FORWARD_SHARE * (val_steps * model.fixed_s + val_per_gpu * model.image_s)
    epochs = sum(p.epochs for p in cfg.phases)
    writes = (epochs // cfg.checkpoint.every_epochs if cfg.checkpoint.every_epochs else 0) + (
        steps // cfg.checkpoint.every_steps if cfg.checkpoint.every_steps else 0)
    parts["checkpoints"] = writes * 4.0 * params * (1 + OPTIMIZER_STATES[cfg.optimizer.name]) / (CHECKPOINT_GB_S * 1e9)
    parts["startup"] = startup_seconds(cfg, spec) if startup else 0.0
    train_s = sum(parts[k] for k in ("compute", "optimizer", "noise_scale", "exchange", "sync_bn", "data_wait"))
    total = sum(parts.values())
    return WallTime(total, train_s, parts["evaluation"], total * spec.gpus / 3600, steps,
                    parts["compute"] / train_s if train_s else 1.0,
                    tuple((p.epochs, p.resolution, p.batch_size) for p in cfg.phases), parts, tuple(notes))


def schedule_text(phases) -> str:
    """`12 ep @16 px x 256` or `4 ep @8 px x 256 -> 8 ep @16 px x 256`."""
    return " -> ".join(f"{e} ep @{r} px x {b}" for e, r, b in phases)
