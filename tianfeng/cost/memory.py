"""What fits in one GPU's memory: the largest per-GPU batch of a model at a resolution.

A training step holds the weights, their gradients and the optimizer's state (fixed), plus the
activations autograd saves for the backward pass (per image). The per-image part is measured
on the model itself: one forward pass of two images on the CPU, summing every distinct tensor
autograd saves (parameters excluded). Mixed precision stores activations in 16 bits: half the
fp32 bytes (an approximation: a few tensors, e.g. the loss's, stay in fp32).

Checked against the published per-GPU batches: ResNet-50 at 224 px measures 82 MiB per image
in fp32, so a 16 GB V100 holds 157 images in fp32 and 314 in mixed precision by this model,
where NVIDIA's DeepLearningExamples train it at 256 per V100 16 GB with AMP (and OOM at 512).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import ModelConfig, RunConfig

GIB = 2**30
# Not the model's: the CUDA context, cuDNN/cuBLAS workspaces and NCCL buffers (~1.5 GiB
# together, an assumption), and the caching allocator's rounding and fragmentation (10%).
RESERVED_GIB = 1.5
USABLE_SHARE = 0.9
MIXED_ACTIVATION_SHARE = 0.5
OPTIMIZER_STATES = {"sgd": 1, "lars": 1, "lamb": 2}  # fp32 tensors per parameter: momentum; Adam's m, v


@functools.lru_cache(maxsize=128)
def activation_bytes(model: ModelConfig, resolution: int, in_channels: int = 3, classes: int = 1000) -> float:
    """fp32 bytes autograd saves per training image of `model` at `resolution` (measured once
    per machine: cost.model_facts keeps it)."""
    from tianfeng.cost.model_facts import known

    return known("activation_bytes", model, resolution, in_channels, classes,
                 lambda: {"bytes": _measured_activation_bytes(model, resolution, in_channels, classes)})["bytes"]


def _measured_activation_bytes(model: ModelConfig, resolution: int, in_channels: int, classes: int) -> float:
    import torch

    from tianfeng.trainers.models import build_model

    batch = 2  # BatchNorm in training mode needs more than one value per channel
    saved: dict[int, int] = {}
    weights: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()  # views of one storage count once
        return t

    with torch.random.fork_rng():  # the caller's random stream stays as it was
        net = build_model(model, in_channels, classes)
        weights.update(p.untyped_storage().data_ptr() for p in net.parameters())
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            net(torch.randn(batch, in_channels, resolution, resolution))
    return sum(saved.values()) / batch


def state_bytes(params: int, optimizer: str) -> float:
    """Weights, gradients and the optimizer's state, all fp32 (mixed precision keeps fp32 masters)."""
    return 4.0 * params * (2 + OPTIMIZER_STATES[optimizer])


@dataclass(frozen=True)
class Fit:
    max_per_gpu: int  # 0: not even one image fits
    image_bytes: float  # activations per image, at the run's precision
    state_bytes: float
    usable_bytes: float

    def describe(self, memory_gib: float) -> str:
        return (f"{self.image_bytes / 2**20:.3g} MiB of activations per image, {self.state_bytes / GIB:.3g} GiB of "
                f"weights, gradients and optimizer state; {self.usable_bytes / GIB:.3g} of {memory_gib:.3g} GiB usable")


def per_gpu_fit(model: ModelConfig, resolution: int, *, mixed: bool, optimizer: str, memory_gib: float,
                params: int, in_channels: int = 3, classes: int = 1000) -> Fit:
    image = activation_bytes(model, resolution, in_channels, classes) * (MIXED_ACTIVATION_SHARE if mixed else 1.0)
    state = state_bytes(params, optimizer)
    usable = memory_gib * GIB * USABLE_SHARE - RESERVED_GIB * GIB
    return Fit(max(0, int((usable - state) // image)), image, state, usable)


def accumulation_needed(cfg: RunConfig, gpus: int, memory_gib: float | None, *, in_channels: int,
                        classes: int) -> int:
    """The fewest micro-batches per step with which every phase's per-GPU batch fits a GPU of
    `memory_gib` (1 when it fits whole or the memory is unknown; at most the per-GPU batch)."""
    if memory_gib is None:
        return 1
    needed = 1
    for p in cfg.phases:
        per_gpu = math.ceil(p.batch_size / gpus)
        fit = phase_fit(cfg, p.resolution, memory_gib, in_channels, classes).max_per_gpu
        needed = max(needed, min(max(1, p.batch_size // gpus), math.ceil(per_gpu / max(1, fit))))
    return needed


def phase_fit(cfg: RunConfig, resolution: int, memory_gib: float, in_channels: int, classes: int) -> Fit:
    """What one device of `memory_gib` holds of `cfg`'s model at `resolution`, in its precision
    and with its optimizer's state."""
    from tianfeng.cost.step_time import step_cost

    params = step_cost(cfg.model, resolution, in_channels, classes).params
    return per_gpu_fit(cfg.model, resolution, mixed=cfg.precision.mode != "fp32", optimizer=cfg.optimizer.name,
                       memory_gib=memory_gib, params=params, in_channels=in_channels, classes=classes)


def memory_split_needed(cfg: RunConfig, memory_gib: float, *, in_channels: int, classes: int, world: int = 1) -> int:
    """The fewest parts each micro-batch of `cfg` must run in for each of `world` processes to
    train its share of the batch on a device of `memory_gib` (a search worker: together they
    emulate every target GPU): a divisor of the GPUs a process emulates, so each emulated GPU's
    micro-batch stays whole and BatchNorm sees what the target GPU's does. ConfigError, naming
    what the device must hold, when not even one emulated GPU's micro-batch fits beside the
    weights and optimizer state."""
    from tianfeng.trainers.per_gpu_bn import emulated_groups

    groups = max(1, emulated_groups(cfg.distributed, world))
    needed = 1
    for i, p in enumerate(cfg.phases):
        fit = phase_fit(cfg, p.resolution, memory_gib, in_channels, classes)
        micro = math.ceil(p.batch_size / world / cfg.accumulate_steps)
        parts = next((d for d in range(1, groups + 1) if groups % d == 0 and math.ceil(micro / d) <= fit.max_per_gpu),
                     None)
        if parts is None:
            least = math.ceil(micro / groups)
            raise ConfigError("", f"phases.{i}.batch_size",
                              f"one emulated GPU's micro-batch ({least} images at {p.resolution} px) does not fit the "
                              f"{memory_gib:.3g} GiB of the device training the trial ({fit.describe(memory_gib)}; it "
                              f"holds {fit.max_per_gpu}): raise accumulate_steps, lower the batch or search on a "
                              "larger device")
        needed = max(needed, parts)
    return needed
