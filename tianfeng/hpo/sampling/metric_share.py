"""The pareto search's sampler: every other trial is drawn for the metric alone.

Multi-objective TPE spreads its trials along the whole front and learns nothing from pruned
trials (a multi-objective study cannot report intermediate values), so on the same budget the
front's accurate end stays below what an accuracy search finds. Here the trials whose number is
odd are drawn by single-objective TPE over the metric, reading the study as an accuracy search
would (completed trials by their metric, pruned ones by the curve they reached); the others by
multi-objective TPE. Both see every trial, so each half learns from the other's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import InMemoryStorage
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tianfeng.hpo.optuna_private import study_id
from tianfeng.hpo.trial_attrs import TrialKey

N_STARTUP_TRIALS = 8
_VIEW_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def metric_view(study: Study, direction: str, current: int) -> tuple[Study, FrozenTrial]:
    """An in-memory single-objective copy of `study` in which each trial's value is its first
    objective and a pruned trial's intermediate values are its per-epoch curve; and the copy of
    trial `current` (running), which the sampler is given in place of the original."""
    storage = InMemoryStorage()
    study_id = storage.create_new_study([StudyDirection[direction.upper()]], "metric-view")
    view = Study(study_name="metric-view", storage=storage)
    mine = None
    for t in study.get_trials(deepcopy=False, states=_VIEW_STATES):
        curve = {int(epoch): float(v) for epoch, v in t.user_attrs.get(TrialKey.CURVE, {}).items()}
        copy = optuna.trial.create_trial(
            state=t.state, params=t.params, distributions=t.distributions, system_attrs=t.system_attrs,
            value=t.values[0] if t.state == TrialState.COMPLETE else None,
            intermediate_values={**curve, **t.intermediate_values})
        trial_id = storage.create_new_trial(study_id, template_trial=copy)
        if t.number == current:
            mine = storage.get_trial(trial_id)
    if mine is None:  # the current trial is always running in the study it came from
        raise ValueError(f"trial {current} is not running in study {study.study_name}")
    return view, mine


class MetricShareSampler(optuna.samplers.BaseSampler):
    """Multi-objective TPE for even trial numbers, TPE over the first objective for odd ones."""

    def __init__(self, seed: int | None, direction: str, *, every: int = 2) -> None:
        self.front = optuna.samplers.TPESampler(seed=seed, n_startup_trials=N_STARTUP_TRIALS)
        self.metric = optuna.samplers.TPESampler(seed=None if seed is None else seed + 7919,
                                                 n_startup_trials=N_STARTUP_TRIALS)
        self.direction, self.every = direction, every
        self._view: tuple[int, int, Study, FrozenTrial] | None = None

    def for_metric(self, trial: FrozenTrial) -> bool:
        return trial.number % self.every == self.every - 1

    def _metric_study(self, study: Study, trial: FrozenTrial) -> tuple[Study, FrozenTrial]:
        key = (study_id(study), trial.number)
        if self._view is None or self._view[:2] != key:
            self._view = (*key, *metric_view(study, self.direction, trial.number))
        return self._view[2], self._view[3]

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self.for_metric(trial):
            return self.metric.infer_relative_search_space(*self._metric_study(study, trial))
        return self.front.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if self.for_metric(trial):
            return self.metric.sample_relative(*self._metric_study(study, trial), search_space)
        return self.front.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if self.for_metric(trial):
            view, mine = self._metric_study(study, trial)
            return self.metric.sample_independent(view, mine, param_name, param_distribution)
        return self.front.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._view = None  # the study has moved on since the last trial
        self.front.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._view = None
        self.front.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.front.reseed_rng()
        self.metric.reseed_rng()
