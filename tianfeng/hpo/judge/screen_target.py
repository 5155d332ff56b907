"""The next full run of a time-to-target screening study: the recipe likeliest to reach the target
soonest on the target cluster.

A screen scores each recipe after its first epochs, and its forecast (screen_forecast) says where
its full run ends. In a time-to-target study what matters is the least predicted wall time among
the recipes that reach the target, so the next full run is the fastest recipe forecast to reach
it, among those not trained whole yet. A full run that ends below the target takes its recipe
out of the running (the forecasts are refitted to it); one that reaches it leaves only faster
recipes worth a full run. While no recipe is forecast to reach the target, there is no such
candidate and the caller falls back to the best forecast, so the full runs still climb towards it.

Waiting for a new candidate costs screening time, and on a target that about one random recipe in
five reaches (cifar5-dev at 75%) a few whole runs find one sooner than a long wait: so while no
full run has reached the target, the search also trains the best untrained forecast once it has
screened as long as its last full run took (`untrained_best`, timed by the leader rule).
"""

from __future__ import annotations

from collections.abc import Mapping

import optuna
from optuna.trial import FrozenTrial

from tianfeng.hpo.judge.scores import maximizing, predicted_s, reaches_target
from tianfeng.storage.study_attrs import StudyKey


def fastest_reached(study: optuna.Study, full_ends: Mapping[int, float | None]) -> FrozenTrial | None:
    """The trial with the least predicted time whose full run (`full_ends`: trial number -> its
    end, None if it did not complete) reached the study's target, else None."""
    numbers = {n for n, end in full_ends.items() if reaches_target(study, end)}
    reached = [t for t in study.get_trials(deepcopy=False) if t.number in numbers and predicted_s(t) is not None]
    return min(reached, key=lambda t: (predicted_s(t), t.number), default=None)


def fastest_to_target(study: optuna.Study, trials: list[FrozenTrial], forecasts: Mapping[int, float | None],
                      full_ends: Mapping[int, float | None]) -> FrozenTrial | None:
    """The trial of `trials` with the least predicted time whose forecast (`forecasts`, by trial
    number) reaches the study's target, has no full run in `full_ends` (trial number: its full
    run's end, None if it did not complete) and is faster than every full run that reached the
    target, whichever screen length its trial had. When no recipe qualifies: the fastest trial
    whose full run reached the target (trained already), else None."""
    reached = fastest_reached(study, full_ends)
    bound = predicted_s(reached) if reached is not None else None
    candidates = [t for t in trials if t.number not in full_ends and reaches_target(study, forecasts.get(t.number))
                  and (s := predicted_s(t)) is not None and (bound is None or s < bound)]
    return min(candidates, key=lambda t: (predicted_s(t), t.number)) if candidates else reached


def untrained_best(study: optuna.Study, trials: list[FrozenTrial], forecasts: Mapping[int, float | None],
                   full_ends: Mapping[int, float | None]) -> FrozenTrial | None:
    """While no full run in `full_ends` has reached the study's target: the trial of `trials` with
    the best forecast (`forecasts`, by trial number) and no full run yet; else None (also when the
    study has no target, or no trial has a forecast)."""
    if study.user_attrs.get(StudyKey.TARGET) is None or any(reaches_target(study, end) for end in full_ends.values()):
        return None
    candidates = [t for t in trials if t.number not in full_ends and forecasts.get(t.number) is not None]
    sign = 1.0 if maximizing(study) else -1.0
    return max(candidates, key=lambda t: (sign * forecasts[t.number], -t.number), default=None)
