"""Pruning waits for a trial's own warm-up, and long runs get ASHA's earlier first rung."""

from __future__ import annotations

import optuna
import pytest

from tianfeng.hpo.judge.past_warmup import PastWarmup
from tianfeng.hpo.sampling.registry import PRUNERS, asha_first_rung


def _trial_with_warmup(study: optuna.Study, warmup: float | None) -> optuna.Trial:
    trial = study.ask()
    if warmup is not None:
        trial.set_user_attr("config", {"schedule": {"warmup_epochs": warmup}})
    return trial


@pytest.mark.parametrize("warmup, first_judged", [(2.5, 3), (3.0, 4), (0.0, 1), (None, 1)])
def test_a_trial_is_judged_only_after_its_own_warmup(warmup: float | None, first_judged: int) -> None:
    # the inner pruner stops every trial it is asked about: the first step it stops at is the first judged
    study = optuna.create_study(direction="maximize", pruner=PastWarmup(optuna.pruners.ThresholdPruner(lower=1e9)))
    trial = _trial_with_warmup(study, warmup)
    judged = None
    for epoch in range(1, 8):
        trial.report(0.5, epoch)
        if trial.should_prune():
            judged = epoch
            break
    assert judged == first_judged


def test_a_rung_passed_during_warmup_is_judged_when_the_warmup_ends() -> None:
    """Three trials reach ASHA's first rung (epoch 2); the fourth is still warming up there and
    below all three. Once its warm-up is over it is judged at that rung on its later value."""
    study = optuna.create_study(direction="maximize", pruner=PastWarmup(PRUNERS["asha"](6)))
    for value in (0.8, 0.7, 0.6):
        trial = _trial_with_warmup(study, 1.0)
        for epoch in (1, 2):  # as a search does: report, then ask (the rung's value is recorded when asked)
            trial.report(value, epoch)
            trial.should_prune()
        study.tell(trial, value)
    late = _trial_with_warmup(study, 3.0)
    for epoch, value in ((1, 0.1), (2, 0.2), (3, 0.3)):
        late.report(value, epoch)
        assert not late.should_prune(), f"judged during its warm-up, at epoch {epoch}"
    late.report(0.4, 4)
    assert late.should_prune()  # 0.4 at the first rung is below the top third of 0.8, 0.7, 0.6


def test_long_runs_get_two_decisions_before_their_end_and_short_runs_one() -> None:
    for epochs in (6, 15, 26):
        first = asha_first_rung(epochs)
        assert first == max(1, epochs // 3) and first * 9 > epochs  # one decision: the second rung is past the end
    for epochs in (27, 52, 90):
        first = asha_first_rung(epochs)
        assert abs(first - epochs / 9) <= 0.5 and first * 3 < epochs  # rungs at a ninth and a third, then the end
    assert asha_first_rung(52) == 6 and asha_first_rung(1) == 1
