"""A study and a trial as plain rows: what `tianfeng status` prints and `--json` returns."""

from __future__ import annotations

from typing import Any

import optuna

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.judge.outcomes import outcome
from tianfeng.hpo.judge.scores import epochs_reported, score
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey


def study_row(summary: optuna.study.StudySummary) -> dict[str, Any]:
    best = summary.best_trial  # None for pareto studies: their best is a front
    return {"study": summary.study_name, "trials": summary.n_trials,
            "objective": summary.user_attrs.get(StudyKey.OBJECTIVE_MODE, ObjectiveMode.ACCURACY.value),
            "best_value": score(best) if best else None,
            "best_trial": best.number if best else None,
            "created": str(summary.datetime_start or "")}


def trial_row(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    predicted = t.user_attrs.get(TrialKey.PREDICTED) or {}
    return {"trial": t.number, "state": str(outcome(t)), "value": score(t),
            "predicted_s": predicted.get("seconds"), "gpu_hours": predicted.get("gpu_hours"),
            "epochs_reported": epochs_reported(t),
            "prior": t.user_attrs.get(TrialKey.PRIOR, ""), "params": t.params,
            "seconds": (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start else None}
