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
    # where the epoch's wall time went (None in records made before they were kept): its training
    # steps (of which data_wait_fraction waited for batches), its evaluation, and, for the first
    # epoch a process trains, the set-up before it (model, data, resume, layout and compile choices)
    train_s: float | None = None
    eval_s: float | None = None
    startup_s: float | None = None
    world: int | None = None  # processes the epoch trained on (an elastic run's changes)


def summary_lines(status: str, final: dict | None, precision: str, run_dir: str) -> list[str]:
    """A finished run for a person: `completed: val_top1 81.60, val_loss 0.7623 after epoch 29
    (bf16)` and its run directory."""
    scores = (f": val_top1 {final['val_top1']:.2f}, val_loss {final['val_loss']:.4f} after epoch {final['epoch']}"
              if final else "")
    return [f"{status}{scores} ({precision})", f"run dir: {run_dir}"]
