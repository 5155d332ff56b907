"""The pareto search's sampler gives every other trial to the metric alone."""

from __future__ import annotations

import statistics

import optuna
from optuna.trial import TrialState

from tianfeng.hpo.sampling.metric_share import MetricShareSampler, metric_view


def test_the_metric_view_is_an_accuracy_study_of_the_same_trials() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    x = optuna.distributions.FloatDistribution(0, 1)
    study.add_trial(optuna.trial.create_trial(values=[0.7, 30.0], params={"x": 0.2}, distributions={"x": x}))
    study.add_trial(optuna.trial.create_trial(state=TrialState.PRUNED, params={"x": 0.9}, distributions={"x": x},
                                              user_attrs={"curve": {"1": 0.3, "2": 0.4}}))
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL, params={"x": 0.5}, distributions={"x": x}))
    running = study.ask()

    view, mine = metric_view(study, "maximize", running.number)

    assert view.direction == optuna.study.StudyDirection.MAXIMIZE
    complete, pruned, current = view.get_trials()  # the failed trial is left out
    assert complete.value == 0.7 and complete.params == {"x": 0.2}
    assert pruned.state == TrialState.PRUNED and pruned.intermediate_values == {1: 0.3, 2: 0.4}
    assert current.state == TrialState.RUNNING and mine.number == current.number


def _accuracy_and_time(trial: optuna.Trial) -> tuple[float, float]:
    """Accuracy peaks at x = 0.8; time grows with x: every x in [0, 0.8] is on the front."""
    x = trial.suggest_float("x", 0.0, 1.0)
    return 1.0 - (x - 0.8) ** 2, x


def test_odd_trials_chase_the_metric_and_even_ones_the_front() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=MetricShareSampler(seed=0, direction="maximize"))
    study.optimize(_accuracy_and_time, n_trials=60)
    after_start = [t for t in study.trials if t.number >= 16]
    metric = [abs(t.params["x"] - 0.8) for t in after_start if t.number % 2 == 1]
    front = [abs(t.params["x"] - 0.8) for t in after_start if t.number % 2 == 0]
    assert statistics.median(metric) < 0.05 < statistics.median(front)


def test_the_metric_half_learns_from_pruned_curves() -> None:
    """Only pruned trials say where the metric is high; the metric's trials go there."""
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=MetricShareSampler(seed=1, direction="maximize"))
    x = optuna.distributions.FloatDistribution(0, 1)
    for i in range(20):
        value = i / 19
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.PRUNED, params={"x": value}, distributions={"x": x},
            user_attrs={"curve": {"1": 1.0 - abs(value - 0.25)}}))
    drawn = []
    for _ in range(10):
        trial = study.ask()
        value = trial.suggest_float("x", 0.0, 1.0)
        if trial.number % 2 == 1:
            drawn.append(value)
        study.tell(trial, state=TrialState.FAIL)
    assert abs(statistics.median(drawn) - 0.25) < 0.15
