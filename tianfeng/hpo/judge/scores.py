"""A trial's proxy score and a study's best trial, whatever the objective mode.

In `accuracy` mode Optuna's value is the metric. In `pareto` mode a trial has two values
(metric, predicted wall time); in `time-to-target` its value is the predicted wall time and
the metric is a constraint. Every trial records its metric as the user attribute `score`, and
its per-epoch metric as `curve` where Optuna cannot keep intermediate values."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from tianfeng.defaults import ObjectiveMode
from tianfeng.hpo.trial_attrs import TrialKey
from tianfeng.storage.study_attrs import StudyKey


def mode_of(study: optuna.Study) -> ObjectiveMode:
    return ObjectiveMode(study.user_attrs.get(StudyKey.OBJECTIVE_MODE, ObjectiveMode.ACCURACY))


def maximizing(study: optuna.Study) -> bool:
    """Whether the metric (not the predicted time) is maximised."""
    direction = study.user_attrs.get(StudyKey.DIRECTION)
    if direction is not None:
        return direction == "maximize"
    return study.directions[0] == optuna.study.StudyDirection.MAXIMIZE


def reaches_target(study: optuna.Study, value: float | None) -> bool:
    """Whether `value` of the metric reaches the study's time-to-target target (False without one)."""
    target = study.user_attrs.get(StudyKey.TARGET)
    if value is None or target is None:
        return False
    return value >= target if maximizing(study) else value <= target


def score(trial: FrozenTrial) -> float | None:
    """The trial's proxy metric (None until it completes)."""
    if "score" in trial.user_attrs:
        return trial.user_attrs[TrialKey.SCORE]
    if trial.values is None or len(trial.values) != 1:
        return None
    return trial.values[0]


def curve(trial: FrozenTrial) -> dict[int, float]:
    """The metric after each epoch the trial trained."""
    if trial.intermediate_values:
        return dict(trial.intermediate_values)
    return {int(k): v for k, v in trial.user_attrs.get(TrialKey.CURVE, {}).items()}


def epochs_reported(trial: FrozenTrial) -> int:
    return max(curve(trial), default=0)


def predicted_s(trial: FrozenTrial) -> float | None:
    return (trial.user_attrs.get(TrialKey.PREDICTED) or {}).get("seconds")


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if score(t) is not None]


def ranked(study: optuna.Study) -> list[FrozenTrial]:
    """Completed trials, best metric first."""
    return sorted(completed(study), key=lambda t: score(t), reverse=maximizing(study))


def front_floor(study: optuna.Study, done: list[FrozenTrial] | None = None) -> float | None:
    """The score a trial needs for a place on the front: the study's accuracy floor and, where that
    floor is the default (the study records the metric's chance level), at least halfway from
    chance to the best completed score, so a near-chance recipe never leads the front. A floor
    the user gave (--min-accuracy, objective.min_accuracy) stands alone."""
    floor = study.user_attrs.get(StudyKey.MIN_ACCURACY)
    chance = study.user_attrs.get(StudyKey.CHANCE)
    done = completed(study) if done is None else done
    if chance is None or not done or not maximizing(study):
        return floor
    relative = chance + (max(score(t) for t in done) - chance) / 2
    return relative if floor is None else max(floor, relative)


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Completed trials no other beats on both metric and predicted time, fastest first; none
    below the floor (`front_floor`) or failing a constraint."""
    sign = 1 if maximizing(study) else -1
    done = completed(study)
    floor = front_floor(study, done)
    feasible = [t for t in done if predicted_s(t) is not None and all(c <= 0 for c in t.constraints.values())
                and (floor is None or score(t) >= floor)]
    front = [t for t in feasible if not any(
        sign * score(o) >= sign * score(t) and predicted_s(o) <= predicted_s(t)
        and (sign * score(o) > sign * score(t) or predicted_s(o) < predicted_s(t)) for o in feasible)]
    return sorted(front, key=predicted_s)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """accuracy and pareto: the best metric. time-to-target: the fastest trial that reached the
    target (Optuna's feasible best), else the best metric."""
    return best_among(study, completed(study))


def best_among(study: optuna.Study, trials: list[FrozenTrial]) -> FrozenTrial | None:
    """`best_trial` of the study's complete `trials` only."""
    if mode_of(study) == ObjectiveMode.TIME_TO_TARGET:
        feasible = [t for t in trials if all(c <= 0 for c in t.constraints.values())]
        if feasible:
            return min(feasible, key=lambda t: t.values[0])
    best = sorted(trials, key=lambda t: score(t), reverse=maximizing(study))
    return best[0] if best else None


def pruned_share(trials: list[FrozenTrial]) -> float:
    """The share of trial wall time spent in trials that were pruned."""
    def took(t: FrozenTrial) -> float:
        return (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else 0

    total = sum(took(t) for t in trials)
    return sum(took(t) for t in trials if t.state == TrialState.PRUNED) / total if total else 0.0
