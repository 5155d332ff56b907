"""The live view of one long run (a promotion, a calibration's runs) on an interactive terminal:
epochs done against the run's total, the metric of the last epoch, elapsed time and ETA. Not a
terminal: nothing (the engine's epoch lines say the same)."""

from __future__ import annotations

import sys

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def progress_bar(label: str, *, enabled: bool) -> Progress:
    """`label ━━━━ k/N  description  elapsed eta remaining`: the bar every long job shows."""
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), disable=not enabled,
                    redirect_stderr=True)


class RunProgress:
    def __init__(self, label: str, total_epochs: int, metric: str = "val_top1") -> None:
        self.metric = metric
        self.enabled = sys.stderr.isatty()
        self._progress = progress_bar(label, enabled=self.enabled)
        self._task = self._progress.add_task("epochs", total=total_epochs)

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def epoch(self, epoch: int, value: float | None) -> None:
        shown = f"{self.metric} {value:.2f}" if value is not None else ""
        self._progress.update(self._task, completed=epoch, description=shown)
