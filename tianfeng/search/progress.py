"""The live view of a running search on an interactive terminal: trials finished against the
budget, pruned and failed counts, best so far, ETA. Per-trial log lines scroll above it."""

from __future__ import annotations

import sys

import optuna
from optuna.trial import TrialState
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tianfeng.search.scores import best_trial, score


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
        count = {s: sum(t.state == s for t in trials) for s in TrialState}
        top = best_trial(study)
        best = f"best {score(top):.4g} (#{top.number})" if top else "no result yet"
        self._progress.update(self._task, completed=count[TrialState.COMPLETE] + count[TrialState.PRUNED],
                              description=f"{best}  pruned {count[TrialState.PRUNED]}  "
                                          f"failed {count[TrialState.FAIL]}  running {count[TrialState.RUNNING]}")
