"""Stopping losers when the objective is not the metric alone (pareto, time-to-target).

Optuna's pruners compare one objective; here a slow recipe that is less accurate than faster
ones is the loser, and a fast recipe must not be killed for trailing slow ones. So at a few
points of its run (a third and two thirds of its epochs, comparable across trials of different
lengths) a trial is compared with its peers: trials predicted to be at most `slack` times
slower on the target cluster. It stops when at least `min_peers` of them reached that point
and it is below their median there.

It is an Optuna pruner (`prune(study, trial)`), the study's own, though Optuna asks no pruner
about a trial of a two-objective study: the objective records a trial's value at each rung it
passes (`record_rung`) and asks the study's pruner itself.
"""

from __future__ import annotations

import statistics

import optuna
from optuna.trial import TrialState

from tianfeng.hpo.judge.scores import predicted_s
from tianfeng.hpo.trial_attrs import TrialKey

RUNGS = (1 / 3, 2 / 3)
RUNG_KEYS = tuple(f"{r:.3f}" for r in RUNGS)


def rung_passed(epoch: int, total: int) -> str | None:
    """The rung this epoch completes: the first epoch at or past each fraction of the run."""
    for r, key in zip(RUNGS, RUNG_KEYS, strict=True):
        if epoch / total >= r > (epoch - 1) / total and epoch < total:
            return key
    return None


def record_rung(trial: optuna.Trial, rung: str, value: float) -> None:
    """Keep the metric `trial` reached at `rung` (one of RUNG_KEYS), where its peers read it."""
    trial.set_user_attr(TrialKey.RUNG_VALUES, {**trial.user_attrs.get(TrialKey.RUNG_VALUES, {}), rung: value})


class PeerPruner(optuna.pruners.BasePruner):
    def __init__(self, maximize: bool, slack: float = 1.25, min_peers: int = 4) -> None:
        self.maximize, self.slack, self.min_peers = maximize, slack, min_peers

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        """Compare the trial's value at the latest rung it passed with its peers' there; a trial
        that passed none, or has no predicted time, trains on."""
        values = trial.user_attrs.get(TrialKey.RUNG_VALUES, {})
        mine = trial.user_attrs.get(TrialKey.PREDICTED, {}).get("seconds")
        if not values or mine is None:
            return False
        rung = max(values, key=float)
        value = values[rung]
        peers = []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)):
            theirs = predicted_s(t)
            if t.number == trial.number or theirs is None or theirs > self.slack * mine:
                continue
            v = t.user_attrs.get(TrialKey.RUNG_VALUES, {}).get(rung)
            if v is not None:
                peers.append(v)
        if len(peers) < self.min_peers:
            return False
        median = statistics.median(peers)
        return value < median if self.maximize else value > median
