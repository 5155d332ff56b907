"""Multi-stage training phases: which resolution and batch size apply at each epoch and step.

Progress is counted in epochs across all phases, so schedules never restart at a phase change.
"""

from __future__ import annotations

from dataclasses import dataclass

from tianfeng.core.errors import ConfigError
from tianfeng.core.run_config import PhaseConfig


@dataclass(frozen=True)
class Phase:
    index: int
    first_epoch: int
    epochs: int
    resolution: int
    batch_size: int  # global
    steps_per_epoch: int


class PhaseTimeline:
    """Maps epochs to phases for a dataset of `train_size` images (last partial batch dropped)."""

    def __init__(self, phases: tuple[PhaseConfig, ...], train_size: int) -> None:
        self.phases: list[Phase] = []
        first = 0
        for i, p in enumerate(phases):
            if p.batch_size > train_size:
                raise ConfigError("", f"phases.{i}.batch_size",
                                  f"must be <= the training set size ({train_size} images), "
                                  f"got {p.batch_size}")
            self.phases.append(Phase(i, first, p.epochs, p.resolution, p.batch_size,
                                     train_size // p.batch_size))
            first += p.epochs
        self.total_epochs = first

    def phase_of_epoch(self, epoch: int) -> Phase:
        for phase in self.phases:
            if epoch < phase.first_epoch + phase.epochs:
                return phase
        raise IndexError(f"epoch {epoch} is past the last phase")

    def progress(self, epoch: int, step_in_epoch: int) -> float:
        """Fractional epochs done at the start of `step_in_epoch` of `epoch`."""
        return epoch + step_in_epoch / self.phase_of_epoch(epoch).steps_per_epoch

    @property
    def max_resolution(self) -> int:
        return max(p.resolution for p in self.phases)

    @property
    def total_steps(self) -> int:
        return sum(p.epochs * p.steps_per_epoch for p in self.phases)

    def steps_until(self, epoch: int) -> int:
        """Optimizer steps in the first `epoch` epochs."""
        return sum(min(p.epochs, max(0, epoch - p.first_epoch)) * p.steps_per_epoch for p in self.phases)
