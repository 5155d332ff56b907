"""The share benchmark's arithmetic: Wilson intervals and the per-target counts of whole runs."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna
import pytest
import whole_run_share  # noqa: E402
from optuna.trial import TrialState


def test_wilson_intervals_match_the_published_formula() -> None:
    low, high = whole_run_share.wilson(5, 10)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    low, high = whole_run_share.wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)  # none reached is not "impossible"
    assert whole_run_share.wilson(0, 0) == (0.0, 1.0)


def test_the_summary_counts_scores_at_or_above_each_target() -> None:
    start = datetime(2026, 1, 1)
    trials = [optuna.trial.create_trial(state=TrialState.COMPLETE, value=v, params={}, distributions={},
                                        user_attrs={"cores": 2})
              for v in (60.0, 75.0, 80.0, 83.5)]
    for i, t in enumerate(trials):
        t.datetime_start, t.datetime_complete = start, start + timedelta(seconds=10 * (i + 1))
    out = whole_run_share.summary(whole_run_share.run_rows(trials, 0), [75.0, 82.0, 90.0])
    assert {k: v["reached"] for k, v in out["targets"].items()} == {"75": 3, "82": 1, "90": 0}
    assert out["targets"]["82"]["share"] == 0.25 and out["best"] == 83.5 and out["median"] == 77.5
    assert out["core_s_median"] == 50.0  # 25 s of wall time at 2 cores


def test_a_run_stopped_for_diverging_counts_as_a_recipe_that_reached_nothing() -> None:
    start = datetime(2026, 1, 1)
    trials = [optuna.trial.create_trial(state=TrialState.COMPLETE, value=80.0, params={}, distributions={}),
              optuna.trial.create_trial(state=TrialState.PRUNED, params={}, distributions={},
                                        intermediate_values={0: 43.4, 1: 20.0})]
    for t in trials:
        t.datetime_start, t.datetime_complete = start, start + timedelta(seconds=10)
    out = whole_run_share.summary(whole_run_share.run_rows(trials, 0), [75.0])
    assert out["recipes"] == 2 and out["stopped"] == 1 and out["targets"]["75"]["share"] == 0.5
    assert out["median"] == 50.0  # the stopped run scores its last value, at chance


def test_earlier_runs_pool_only_from_other_seeds() -> None:
    """Bug: a second run with the same seed counted twice (its recipes are the same draws),
    or another seed's runs left out of the share."""
    mine = [{"seed": 1, "trial": 0, "score": 81.0, "stopped": False, "core_s": 1.0, "params": {}}]
    earlier = [{"seed": 0, "trial": i, "score": 50.0 + i, "stopped": False, "core_s": 1.0, "params": {}}
               for i in range(3)] + [{"seed": 1, "trial": 0, "score": 81.0, "stopped": False, "core_s": 1.0,
                                      "params": {}}]
    rows = whole_run_share.pooled(mine, earlier)
    out = whole_run_share.summary(rows, [80.0])
    assert out["recipes"] == 4 and out["seeds"] == [0, 1] and out["targets"]["80"]["reached"] == 1
