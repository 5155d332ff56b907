"""A trainer that trains nothing: one epoch of zeros per configured epoch, for measuring what the
search platform itself costs per trial. Importable on its own (Ray workers load it by name)."""

from __future__ import annotations

from pathlib import Path

from tianfeng.core.states import RunStatus
from tianfeng.trainers.engine import EpochMetrics, RunResult, StopTraining


def empty_trainer(cfg, callback) -> RunResult:
    """As the engine's `train`: a callback that stops the run (a pruned trial) ends
    it with that status, not with an exception."""
    epochs = []
    try:
        for e in range(1, cfg.total_epochs + 1):
            m = EpochMetrics(epoch=e, phase=0, resolution=cfg.phases[0].resolution,
                             batch_size=cfg.phases[0].batch_size, lr=0.0, train_loss=0.0, val_loss=0.0,
                             val_top1=float(e), val_top5=0.0, samples_per_s=0.0, data_wait_fraction=0.0,
                             skipped_steps=0, elapsed_s=0.0)
            epochs.append(m)
            callback(m)
    except StopTraining as stop:
        return RunResult(RunStatus(stop.status), epochs, Path(cfg.resolved_run_dir), "fp32", str(stop))
    return RunResult(RunStatus.COMPLETED, epochs, Path(cfg.resolved_run_dir), "fp32")
