"""Per-epoch metrics as TensorBoard scalars in <run_dir>/tensorboard (TensorBoard's own event
format, written by torch.utils.tensorboard), beside metrics.jsonl: `tensorboard --logdir runs/`."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("tianfeng.engine")

SCALARS = ("train_loss", "val_loss", "val_top1", "val_top5", "lr", "samples_per_s", "data_wait_fraction",
           "noise_scale", "resolution", "batch_size")


class EpochBoard:
    """One run's event file. `first_epoch` > 0 (a resume) drops events logged after the checkpoint
    the run resumes from, so a re-run epoch is not shown twice."""

    def __init__(self, run_dir: Path, first_epoch: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=first_epoch + 1 if first_epoch else None)

    def write(self, metrics) -> None:
        for name in SCALARS:
            value = getattr(metrics, name)
            if value is not None:
                self.writer.add_scalar(name, value, metrics.epoch)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_board(run_dir: Path, first_epoch: int) -> EpochBoard | None:
    try:
        return EpochBoard(run_dir, first_epoch)
    except ImportError as exc:  # tensorboard is a dependency; a trimmed environment says so once
        log.warning("no TensorBoard event file for this run: %s (pip install tensorboard)", exc)
        return None
