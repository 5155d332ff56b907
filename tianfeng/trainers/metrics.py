"""What the engine reports after every epoch: a plain record, importable without torch (the
search reads its field names as the metrics a space may optimise)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int  # epochs completed, 1-based
    phase: int
    resolution: int
    batch_size: int
    lr: float  # at the last step of the epoch
    train_loss: float
    val_loss: float
    val_top1: float  # percent
    val_top5: float  # percent
    samples_per_s: float
    data_wait_fraction: float  # share of the epoch's wall time spent waiting for batches
    skipped_steps: int  # fp16 steps skipped for inf/nan gradients
    elapsed_s: float  # since the run (or its first resume) started
    noise_scale: float | None = None  # B_simple over the epoch's measured steps (trainers/noise_scale)
