"""A screened recipe's full-run score forecast from its screen and its epoch budget, and the
leader it picks: a longer recipe with a lower screen leads once the study's full runs show what
longer runs gain over their screens."""

from __future__ import annotations

import math

import optuna
import pytest

from tianfeng.hpo.judge.screen_check import agreeing_length, check_screen
from tianfeng.hpo.judge.screen_forecast import forecast, forecast_end, full_epochs, gain_slope
from tianfeng.promotion.leaders import proxy_leader

SHORT = [60.0, 64.0, 66.0, 68.0, 69.0, 70.0]  # 6 epochs: a fast start, ends 10 above its first epoch
LONG = [55.0] + [60.0 + i for i in range(16)] + [78.0]  # 18 epochs: a slower start, ends 23 above it


def _screened(study: optuna.Study, value: float, epochs: int) -> None:
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    study.add_trial(optuna.create_trial(value=value, params={"x": 0.5}, distributions=dist,
                                        user_attrs={"config": {"phases": [{"epochs": epochs // 2},
                                                                          {"epochs": epochs - epochs // 2}]}}))


def test_the_slope_is_the_least_squares_gain_per_log_epoch_through_the_origin() -> None:
    x_short, x_long = math.log(6), math.log(18)
    expected = (x_short * 10.0 + x_long * 23.0) / (x_short ** 2 + x_long ** 2)
    assert gain_slope([SHORT, LONG], 1) == pytest.approx(expected)
    assert gain_slope([SHORT], 1) == pytest.approx(10.0 / x_short)  # one run: its own gain exactly
    assert gain_slope([], 1) == 0.0 and gain_slope([[50.0, 60.0]], 2) == 0.0  # nothing longer than the screen
    assert gain_slope([LONG], 3) == pytest.approx((78.0 - 61.0) / math.log(18 / 3))  # from the screen's epoch


def test_the_forecast_adds_the_budgets_gain_and_a_run_no_longer_than_the_screen_ends_there() -> None:
    assert forecast_end(55.0, 18, 1, 8.0) == pytest.approx(55.0 + 8.0 * math.log(18))
    assert forecast_end(55.0, 18, 3, 8.0) == pytest.approx(55.0 + 8.0 * math.log(6))
    assert forecast_end(55.0, 3, 3, 8.0) == 55.0 and forecast_end(55.0, 2, 3, 8.0) == 55.0
    study = optuna.create_study(direction="maximize")
    _screened(study, 55.0, 18)
    trial = study.trials[0]
    assert full_epochs(trial) == 18
    assert forecast(trial, 1, 8.0) == pytest.approx(55.0 + 8.0 * math.log(18))
    study.add_trial(optuna.create_trial(value=40.0, params={"x": 0.5},  # no configuration: its screen score
                                        distributions={"x": optuna.distributions.FloatDistribution(0, 1)}))
    assert full_epochs(study.trials[1]) is None and forecast(study.trials[1], 1, 8.0) == 40.0


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_longer_recipe_with_a_lower_screen_leads_once_full_runs_show_its_budgets_gain(direction: str) -> None:
    sign = 1.0 if direction == "maximize" else -1.0  # a minimised metric: the same story negated
    study = optuna.create_study(direction=direction)
    study.set_user_attr("objective_mode", "accuracy")
    for value, epochs in ((57.0, 6), (55.0, 18), (40.0, 12)):
        _screened(study, sign * value, epochs)
    assert proxy_leader(study, screen_epochs=1).value == sign * 57.0  # no full run yet: the screen's order
    curves = [[sign * v for v in SHORT], [sign * v for v in LONG]]
    assert proxy_leader(study, screen_epochs=1, full_curves=curves).value == sign * 55.0
    # a full run that gained nothing over its screen: the screen's order again
    assert proxy_leader(study, screen_epochs=1, full_curves=[[sign * 60.0] * 12]).value == sign * 57.0


def _timed(study: optuna.Study, screened: float, epochs: int, seconds: float) -> int:
    """A time-to-target screen: Optuna's value is the predicted time, the metric is `score`."""
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    study.add_trial(optuna.create_trial(value=seconds, params={"x": 0.5}, distributions=dist, user_attrs={
        "score": screened, "predicted": {"seconds": seconds},
        "config": {"phases": [{"epochs": epochs}]}}))
    return study.trials[-1].number


def _time_to_target_study(target: float | None) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    study.set_user_attr("objective_mode", "time-to-target")
    study.set_user_attr("direction", "maximize")
    study.set_user_attr("target", target)
    return study


def test_time_to_target_screens_promote_the_fastest_recipe_forecast_to_reach_the_target() -> None:
    study = _time_to_target_study(75.0)
    prior = _timed(study, 50.0, 12, 50.0)
    slow = _timed(study, 56.0, 29, 90.0)  # forecast above 75, but slow
    fast = _timed(study, 60.0, 7, 40.0)  # just above 75 with the prior's slope, the fastest
    short = _timed(study, 49.0, 6, 30.0)  # fastest of all, forecast below 75
    # no full run yet: no slope, no forecast reaches 75, so the best screen leads (the accuracy rule)
    assert proxy_leader(study, screen_epochs=1).number == fast
    prior_run = [50.0] + [60.0] * 10 + [70.0]  # 12 epochs, +20 over its first: slope 20 / ln 12
    slope = 20.0 / math.log(12)
    assert 60.0 + slope * math.log(7) >= 75.0 > 49.0 + slope * math.log(6)
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends={prior: 70.0}).number == fast
    # its full run ended at 66: out of the running, and the slower recipe forecast to reach 75 is next
    ends = {prior: 70.0, fast: 66.0}
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends=ends).number == slow
    # a promoted trial whose run did not complete (None) is not promoted again either
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends={prior: 70.0, fast: None}).number == slow
    # once a full run reached the target only faster recipes are worth one: none here, so the leader
    # is the fastest that reached it, already trained
    ends = {prior: 70.0, fast: 66.0, slow: 81.0}
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends=ends).number == slow
    faster = _timed(study, 60.0, 20, 70.0)
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends=ends).number == faster
    assert short not in (prior, slow, fast, faster)


def test_a_full_run_that_reached_the_target_bounds_the_next_whatever_its_screens_length() -> None:
    study = _time_to_target_study(75.0)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}

    def screened(score: float, seconds: float, length: int) -> int:
        study.add_trial(optuna.create_trial(value=seconds, params={"x": 0.5}, distributions=dist, user_attrs={
            "score": score, "predicted": {"seconds": seconds}, "screened_epochs": length,
            "config": {"phases": [{"epochs": 12}]}}))
        return study.trials[-1].number

    reached = screened(60.0, 50.0, 1)  # screened for 1 epoch; its full run ended at 80
    study.set_user_attr("screen_epochs", 3)  # the screen has lengthened since
    slower, faster = screened(70.0, 60.0, 3), screened(70.0, 45.0, 3)  # both forecast at 90
    screened(40.0, 90.0, 3)  # forecast at 60
    curves, ends = [[60.0] * 11 + [80.0]], {reached: 80.0}
    assert proxy_leader(study, screen_epochs=1, full_curves=curves, full_ends=ends).number == faster
    # the faster one missed: the slower one is not worth a full run, though the run that reached
    # the target was screened for 1 epoch and is not among the trials the leader is chosen from
    ends[faster] = 70.0
    assert proxy_leader(study, screen_epochs=1, full_curves=curves, full_ends=ends).number == reached
    assert slower not in ends


def test_time_to_target_screens_of_a_minimised_metric_reach_downwards() -> None:
    study = _time_to_target_study(0.5)
    study.set_user_attr("direction", "minimize")
    prior = _timed(study, 2.0, 12, 50.0)
    slow, fast = _timed(study, 1.6, 30, 90.0), _timed(study, 1.4, 6, 40.0)
    prior_run = [2.0] + [1.5] * 10 + [1.0]  # a loss: -1.0 over its first epoch
    # fast's forecast 1.4 - ln 6 / ln 12 = 0.68 misses 0.5; slow's, credited 12 epochs, 0.6 misses
    # too: the best forecast leads, as in accuracy mode
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends={prior: 1.0}).number == slow
    study.set_user_attr("target", 0.7)  # now both reach it: the faster leads
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run], full_ends={prior: 1.0}).number == fast
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior_run],
                        full_ends={prior: 1.0, fast: 0.9}).number == slow


def test_the_screen_does_not_lengthen_when_the_budgets_gain_explains_the_full_runs(tmp_path) -> None:
    # after one epoch SHORT leads; LONG ends best, as its 18 epochs forecast: the screen agrees
    assert agreeing_length([SHORT, LONG], 1, maximize=True) == 1
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    assert check_screen(study, [SHORT, LONG], 1) == 1 and "screen_epochs" not in study.user_attrs
    # the same two ends at equal budgets: the first epoch ranks them wrongly, and the screen lengthens
    flat_long = [55.0] + [60.0 + i for i in range(4)] + [78.0]
    assert agreeing_length([SHORT, flat_long], 1, maximize=True) == 3


def test_a_recipe_longer_than_every_full_run_is_credited_with_the_longest_runs_epochs() -> None:
    assert forecast_end(46.0, 29, 1, 8.0, longest=12) == pytest.approx(46.0 + 8.0 * math.log(12))
    assert forecast_end(46.0, 10, 1, 8.0, longest=12) == pytest.approx(46.0 + 8.0 * math.log(10))
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("objective_mode", "accuracy")
    for value, epochs in ((51.0, 12), (46.0, 29), (40.0, 6)):
        _screened(study, value, epochs)
    prior = [51.0] + [55.0] * 10 + [70.0]  # the only full run: 12 epochs, 19 above its first
    # ln(29) would put the long recipe at 46 + 7.6 x 3.37 = 71.6, above the prior's 70: not past 12 epochs
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior]).value == 51.0
    longer = [46.0] + [60.0] * 27 + [80.0]  # once a 29-epoch run is whole, its length is credited
    assert proxy_leader(study, screen_epochs=1, full_curves=[prior, longer]).value == 46.0
