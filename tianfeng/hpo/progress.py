"""The live view of a running search on an interactive terminal: trials finished against the
budget, pruned and failed counts, best so far, ETA. Per-trial log lines scroll above it."""

from __future__ import annotations

import sys

import optuna
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tianfeng.hpo.outcomes import Outcome, count_outcomes
from tianfeng.hpo.scores import best_trial, score


class StudyProgress:
    def __init__(self, total: int | None, metric: str) -> None:
        self.metric = metric
        self.enabled = sys.stderr.isatty()
        self._progress = Progress(TextColumn("[bold]search"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.description}"), TimeRemainingColumn(),
                                  disable=not self.enabled, redirect_stderr=True)
        self._task = self._progress.add_task("", total=total)

    def __enter__(self) -> StudyProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, study: optuna.Study, *_: object) -> None:
        """Also usable as an Optuna callback: `(study, trial)`."""
        if not self.enabled:
            return
        trials = study.get_trials(deepcopy=False)
        count = count_outcomes(trials)
        top = best_trial(study)
        best = f"best {score(top):.4g} (#{top.number})" if top else "no result yet"
        interrupted = f"  interrupted {count[Outcome.INTERRUPTED]}" if count[Outcome.INTERRUPTED] else ""
        # the budget counts failed trials; interrupted ones continue as new trials
        self._progress.update(self._task,
                              completed=count[Outcome.COMPLETE] + count[Outcome.PRUNED] + count[Outcome.FAILED],
                              description=f"{best}  pruned {count[Outcome.PRUNED]}  failed {count[Outcome.FAILED]}"
                                          f"{interrupted}  running {count[Outcome.RUNNING]}")
